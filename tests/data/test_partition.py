"""Tests of the client partitioners."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim_jax.data import partitioners as partition

NUM_CLASSES = 10
# Balanced labels in shuffled order, like Fashion-MNIST: 100 examples per class.
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_CLASSES), 100))

CASES = {
  'iid': {},
  'dirichlet': {'concentration': 0.5},
  'shards': {'shards_per_client': 2},
  'class': {'classes_per_client': (2, 3)},
  'dual_dirichlet': {'alpha_1': 20.0, 'alpha_2': 0.5},
  'gamma_mix': {'gamma': 0.5},
  'two_classes': {},
  'budget_skewed': {'budget_skew': 'high'},
}
BUDGETS = np.repeat([1.0, 0.5, 0.25, 0.125], 5)


def _run(method: str, seed: int, num_clients: int = 20) -> list[np.ndarray]:
  return partition.partition(
    method, LABELS, num_clients, seed=seed, budgets=BUDGETS, **CASES[method]
  )


def _mean_label_entropy(parts: list[np.ndarray]) -> float:
  entropies = []
  for part in parts:
    p = np.bincount(LABELS[part], minlength=NUM_CLASSES) / part.size
    p = p[p > 0]
    entropies.append(-(p * np.log(p)).sum())
  return float(np.mean(entropies))


def test_registry() -> None:
  # The library's own entries (tests and README examples may register more in this process).
  library = {
    e.name for e in partition.PARTITIONERS if e.factory.__module__.startswith('fedsim_jax.')
  }
  assert library == {*CASES, 'natural'}


@pytest.mark.parametrize('method', CASES)
def test_every_example_assigned_exactly_once(method: str) -> None:
  parts = _run(method, seed=1)
  assert len(parts) == 20
  for part in parts:
    assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
  assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(LABELS.size))


@pytest.mark.parametrize('method', CASES)
def test_deterministic_by_seed(method: str) -> None:
  first, again, other = _run(method, seed=3), _run(method, seed=3), _run(method, seed=4)
  assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


# The function each registered partitioner runs, with its settings as plain arguments.
DIRECT = {
  'iid': lambda seed: partition.iid(LABELS.size, 20, seed),
  'dirichlet': lambda seed: partition.dirichlet(LABELS, 20, 0.5, seed),
  'shards': lambda seed: partition.shards(LABELS, 20, 2, seed),
  'class': lambda seed: partition.class_partition(LABELS, 20, seed, classes_per_client=(2, 3)),
  'dual_dirichlet': lambda seed: partition.dual_dirichlet(
    LABELS, 20, seed, alpha_1=20.0, alpha_2=0.5
  ),
  'gamma_mix': lambda seed: partition.gamma_mix(LABELS, 20, 0.5, seed),
  'two_classes': lambda seed: partition.two_classes_per_client(LABELS, 20, seed),
  'budget_skewed': lambda seed: partition.budget_skewed(
    LABELS, 20, seed, budgets=BUDGETS, skew='high'
  ),
}


@pytest.mark.parametrize('method', CASES)
def test_the_registered_partitioner_is_the_function(method: str) -> None:
  assert all(np.array_equal(a, b) for a, b in zip(_run(method, 5), DIRECT[method](5), strict=True))


def test_registered_natural_groups_by_client_id() -> None:
  client_ids = np.array([3, 1, 3, 3, 1, 7])
  run = lambda size: partition.partition(
    'natural', LABELS[:6], 0, seed=0, client_ids=client_ids, min_client_size=size
  )
  assert [p.tolist() for p in run(0)] == [[1, 4], [0, 2, 3], [5]]
  assert [p.tolist() for p in run(2)] == [[1, 4], [0, 2, 3]]


@pytest.mark.parametrize(
  ('call', 'message'),
  [
    (lambda: partition.partition('bogus', LABELS, 5, seed=0), "partition.name='bogus' is not"),
    (
      lambda: partition.partition('dirichlet', LABELS, 5, seed=0, concentration=None),
      'partition.kwargs.concentration=None',
    ),
    (
      lambda: partition.partition('class', LABELS, 5, seed=0, concentration=0.5),
      'partition.kwargs.concentration is not a setting of ClassSettings',
    ),
    (lambda: partition.partition('natural', LABELS, 5, seed=0), 'has no natural client ids'),
    (
      lambda: partition.partition('budget_skewed', LABELS, 5, seed=0),
      'budget_skewed needs the compute budgets',
    ),
  ],
)
def test_registered_partitioner_errors(call, message: str) -> None:
  with pytest.raises(ValueError, match=message) as info:
    call()
  assert '\n' not in str(info.value)


def test_iid_sizes_differ_by_at_most_one() -> None:
  sizes = [part.size for part in partition.iid(1003, 10, seed=0)]
  assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


def test_dirichlet_respects_min_client_size() -> None:
  parts = partition.dirichlet(LABELS, 20, concentration=0.1, seed=0, min_client_size=20)
  assert min(part.size for part in parts) >= 20


@pytest.mark.parametrize(
  ('min_client_size', 'max_attempts'),
  [(51, 1000), (49, 3)],  # 20 * 51 > 1000 examples; 49 is possible but very unlikely.
)
def test_dirichlet_impossible_min_size_raises(min_client_size: int, max_attempts: int) -> None:
  with pytest.raises(ValueError, match='min_client_size'):
    partition.dirichlet(
        LABELS, 20, concentration=0.1, seed=0,
        min_client_size=min_client_size, max_attempts=max_attempts,
    )  # fmt: skip


def test_small_concentration_gives_more_label_skew() -> None:
  skewed = partition.dirichlet(LABELS, 10, concentration=0.1, seed=0, min_client_size=1)
  uniform = partition.dirichlet(LABELS, 10, concentration=100.0, seed=0, min_client_size=1)
  assert _mean_label_entropy(skewed) < 0.6 * _mean_label_entropy(uniform)
  assert _mean_label_entropy(uniform) > 0.95 * np.log(NUM_CLASSES)


@pytest.mark.parametrize('shards_per_client', [1, 2, 5])
def test_shards_limit_classes_per_client(shards_per_client: int) -> None:
  # 1000 examples / (10 clients * k shards): shard boundaries fall on class boundaries.
  parts = partition.shards(LABELS, 10, shards_per_client, seed=0)
  for part in parts:
    assert np.unique(LABELS[part]).size <= shards_per_client


@pytest.mark.parametrize(
  ('call', 'setting'),
  [
    (lambda: partition.iid(10, 0, seed=0), 'num_clients'),
    (lambda: partition.iid(10, 11, seed=0), 'num_clients'),
    (lambda: partition.dirichlet(LABELS, 5, concentration=0.0, seed=0), 'concentration'),
    (lambda: partition.dirichlet(LABELS, 5, float('nan'), seed=0), 'concentration'),
    (lambda: partition.dirichlet(LABELS, 5, 1.0, 0, min_client_size=-1), 'min_client_size'),
    (lambda: partition.dirichlet(LABELS.astype(float), 5, 1.0, seed=0), 'labels'),
    (lambda: partition.shards(LABELS, 5, 0, seed=0), 'shards_per_client'),
    (lambda: partition.shards(LABELS, 500, 3, seed=0), 'shards_per_client'),
    (lambda: partition.partition('bogus', LABELS, 5, seed=0), 'partition.name'),
  ],
)
def test_invalid_settings_raise_one_line(call, setting: str) -> None:
  with pytest.raises(ValueError) as info:
    call()
  message = str(info.value)
  assert setting in message and 'allowed' in message and '\n' not in message
