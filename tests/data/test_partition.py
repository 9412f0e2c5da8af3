"""Tests of the client partitioners."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim_jax.data import partition

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
  'budget_skewed': {'budgets': np.repeat([1.0, 0.5, 0.25, 0.125], 5), 'skew': 'high'},
}


def _run(method: str, seed: int, num_clients: int = 20) -> list[np.ndarray]:
  return partition.partition(method, LABELS, num_clients, seed=seed, **CASES[method])


def _mean_label_entropy(parts: list[np.ndarray]) -> float:
  entropies = []
  for part in parts:
    p = np.bincount(LABELS[part], minlength=NUM_CLASSES) / part.size
    p = p[p > 0]
    entropies.append(-(p * np.log(p)).sum())
  return float(np.mean(entropies))


def test_registry() -> None:
  assert set(partition.PARTITIONERS) == set(CASES)


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


# `partition_by_name` takes an experiment config's setting names (budget_skewed's `skew` is
# `budget_skew` there).
BY_NAME = {
  method: {('budget_skew' if key == 'skew' else key): value for key, value in settings.items()}
  for method, settings in CASES.items()
}


def test_partition_names_are_the_partitioners_and_natural() -> None:
  assert partition.PARTITIONS == (*partition.PARTITIONERS, 'natural')


@pytest.mark.parametrize('method', CASES)
def test_partition_by_name_is_the_partitioner(method: str) -> None:
  by_name = partition.partition_by_name(method, LABELS, 20, 5, **BY_NAME[method])
  assert all(np.array_equal(a, b) for a, b in zip(by_name, _run(method, seed=5), strict=True))


def test_partition_by_name_ignores_other_partitions_settings() -> None:
  others = dict(concentration=0.1, shards_per_client=4, gamma=0.9, alpha_1=3.0, min_client_size=0)
  parts = partition.partition_by_name('class', LABELS, 20, 5, classes_per_client=[2, 3], **others)
  assert all(np.array_equal(a, b) for a, b in zip(parts, _run('class', seed=5), strict=True))


def test_partition_by_name_natural_groups_by_client_id() -> None:
  client_ids = np.array([3, 1, 3, 3, 1, 7])
  assert [
    p.tolist()
    for p in partition.partition_by_name(
      'natural', LABELS[:6], 0, 0, client_ids=client_ids, min_client_size=0
    )
  ] == [[1, 4], [0, 2, 3], [5]]
  assert [
    p.tolist()
    for p in partition.partition_by_name(
      'natural', LABELS[:6], 0, 0, client_ids=client_ids, min_client_size=2
    )
  ] == [[1, 4], [0, 2, 3]]


@pytest.mark.parametrize(
  ('call', 'message'),
  [
    (lambda: partition.partition_by_name('bogus', LABELS, 5, 0), "name='bogus' is invalid"),
    (lambda: partition.partition_by_name('dirichlet', LABELS, 5, 0), 'concentration=None'),
    (
      lambda: partition.partition_by_name('natural', LABELS, 5, 0, dataset_name='digits'),
      "dataset 'digits' has no natural client ids",
    ),
  ],
)
def test_partition_by_name_errors(call, message: str) -> None:
  with pytest.raises(ValueError, match=message):
    call()


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
    (lambda: partition.partition('bogus', LABELS, 5, seed=0), 'method'),
  ],
)
def test_invalid_settings_raise_one_line(call, setting: str) -> None:
  with pytest.raises(ValueError) as info:
    call()
  message = str(info.value)
  assert setting in message and 'allowed' in message and '\n' not in message
