"""Tests of the FedCompass partitioners (Li et al. 2024, Appendix D.1, Algorithms 4-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim_jax.data import partitioners as partition

NUM_CLASSES = 10
PER_CLASS = 600
# Balanced labels in shuffled order: 10 classes x 600 examples.
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_CLASSES), PER_CLASS))
METHODS = ('class', 'dual_dirichlet')
FUNCTIONS = {'class': partition.class_partition, 'dual_dirichlet': partition.dual_dirichlet}


def _class_counts(part: np.ndarray, labels: np.ndarray = LABELS) -> np.ndarray:
  return np.bincount(labels[part], minlength=NUM_CLASSES)


def _entropy(counts: np.ndarray) -> float:
  p = counts / counts.sum()
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


def _check_exact_cover(parts: list[np.ndarray], num_clients: int, size: int = LABELS.size) -> None:
  assert len(parts) == num_clients
  for part in parts:
    assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
  assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(size))


def test_registered_and_dispatched() -> None:
  assert partition.PARTITIONERS.get('class').settings is partition.ClassSettings
  assert partition.PARTITIONERS.get('dual_dirichlet').settings is partition.DualDirichletSettings
  for method in METHODS:
    via_dispatch = partition.partition(method, LABELS, 10, seed=7)
    direct = FUNCTIONS[method](LABELS, 10, 7)
    assert all(np.array_equal(a, b) for a, b in zip(via_dispatch, direct, strict=True))


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('num_clients', partition.FEDCOMPASS_NUM_CLIENTS)
def test_paper_defaults_assign_every_example_once_and_no_empty_client(
  method: str, num_clients: int
) -> None:
  for seed in range(3):
    parts = partition.partition(method, LABELS, num_clients, seed=seed)
    _check_exact_cover(parts, num_clients)
    assert min(part.size for part in parts) >= 1


@pytest.mark.parametrize('method', METHODS)
def test_deterministic_by_seed(method: str) -> None:
  first = partition.partition(method, LABELS, 10, seed=3)
  again = partition.partition(method, LABELS, 10, seed=3)
  other = partition.partition(method, LABELS, 10, seed=4)
  assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_fedcompass_settings_per_client_count() -> None:
  # Paper, Appendix D.1.1: mu = 10, sigma = 3; m = 5 -> [5, 6]; m = 10, 20 -> [3, 5].
  assert partition.fedcompass_class_partition_settings(5) == {
    'classes_per_client': (5, 6),
    'mean': 10.0,
    'std': 3.0,
  }
  for m in (10, 20):
    assert partition.fedcompass_class_partition_settings(m) == {
      'classes_per_client': (3, 5),
      'mean': 10.0,
      'std': 3.0,
    }
  # Paper, Appendix D.1.2: alpha_1 = m, alpha_2 = 0.5.
  for m in (5, 10, 20):
    assert partition.fedcompass_dual_dirichlet_settings(m) == {'alpha_1': float(m), 'alpha_2': 0.5}
  for helper in (
    partition.fedcompass_class_partition_settings,
    partition.fedcompass_dual_dirichlet_settings,
  ):
    for m in (1, 7, 50):
      with pytest.raises(ValueError, match='num_clients'):
        helper(m)


def test_defaults_equal_the_paper_settings() -> None:
  for m in (5, 20):
    explicit = partition.class_partition(
      LABELS, m, 1, **partition.fedcompass_class_partition_settings(m)
    )
    default = partition.class_partition(LABELS, m, 1)
    assert all(np.array_equal(a, b) for a, b in zip(explicit, default, strict=True))
    explicit = partition.dual_dirichlet(
      LABELS, m, 1, **partition.fedcompass_dual_dirichlet_settings(m)
    )
    default = partition.dual_dirichlet(LABELS, m, 1)
    assert all(np.array_equal(a, b) for a, b in zip(explicit, default, strict=True))


def test_other_client_counts_need_explicit_settings() -> None:
  with pytest.raises(ValueError, match='classes_per_client'):
    partition.class_partition(LABELS, 7, 0)
  with pytest.raises(ValueError, match='alpha_1'):
    partition.dual_dirichlet(LABELS, 7, 0)
  with pytest.raises(ValueError, match='alpha_1'):
    partition.dual_dirichlet(LABELS, 7, 0, alpha_2=0.5)
  _check_exact_cover(partition.class_partition(LABELS, 7, 0, classes_per_client=(2, 4)), 7)
  _check_exact_cover(partition.dual_dirichlet(LABELS, 7, 0, alpha_1=7.0, alpha_2=0.5), 7)


@pytest.mark.parametrize('num_clients', partition.FEDCOMPASS_NUM_CLIENTS)
def test_class_partition_classes_per_client_in_paper_range(num_clients: int) -> None:
  low, high = partition.fedcompass_class_partition_settings(num_clients)['classes_per_client']
  seen = set()
  for seed in range(10):
    parts = partition.class_partition(LABELS, num_clients, seed)
    held = [int(np.count_nonzero(_class_counts(part))) for part in parts]
    assert all(low <= k <= high for k in held)
    seen.update(held)
  assert seen == set(range(low, high + 1))  # randint includes both ends


def test_class_partition_fixed_classes_and_equal_shares_with_zero_std() -> None:
  parts = partition.class_partition(LABELS, 10, 0, classes_per_client=2, std=0.0)
  counts = np.stack([_class_counts(part) for part in parts])  # [clients, classes]
  assert np.all(np.count_nonzero(counts, axis=1) == 2)
  for c in range(NUM_CLASSES):
    column = counts[:, c][counts[:, c] > 0]
    # Equal normal draws -> each holder gets PER_CLASS / holders (cumulative flooring).
    assert column.sum() == PER_CLASS and column.max() - column.min() <= 1


def test_class_partition_normal_shares_vary_with_std() -> None:
  def spread(std: float) -> float:
    values = []
    for seed in range(10):
      counts = np.stack(
        [
          _class_counts(p)
          for p in partition.class_partition(LABELS, 10, seed, classes_per_client=(3, 5), std=std)
        ]
      )
      for c in range(NUM_CLASSES):
        column = counts[:, c][counts[:, c] > 0]
        values.append(column.std() / column.mean())
    return float(np.mean(values))

  assert spread(0.0) < 0.01 < spread(3.0) < spread(8.0)


def test_class_partition_handles_non_contiguous_labels() -> None:
  labels = np.array([3, 7, 9] * 50)
  parts = partition.class_partition(labels, 4, 0, classes_per_client=(1, 2))
  _check_exact_cover(parts, 4, labels.size)
  assert all(1 <= np.unique(labels[part]).size <= 2 for part in parts)


def test_dual_dirichlet_tiny_alpha_2_gives_few_classes_per_client() -> None:
  for seed in range(5):
    # Log-space draws: no class is left with all-zero weights (no 0/0 shares).
    parts = partition.dual_dirichlet(LABELS, 10, seed, alpha_1=10.0, alpha_2=1e-4)
    _check_exact_cover(parts, 10)
    # The last client gets each class's rounding remainder (as in the authors' code), so
    # only the first m - 1 clients are checked. A class that no client favours goes whole
    # to the client with the largest (tiny) weight, so some clients hold two classes.
    counts = np.stack([_class_counts(part) for part in parts[:-1]])
    held = np.count_nonzero(counts, axis=1)
    assert held.max() <= 3 and held.mean() <= 1.7
    assert np.count_nonzero(counts, axis=0).mean() <= 1.5  # clients holding each class


def test_dual_dirichlet_skews_respond_to_concentrations() -> None:
  def stats(alpha_1: float, alpha_2: float) -> tuple[float, float]:
    size_cv, entropy = [], []
    for seed in range(20):
      parts = partition.dual_dirichlet(LABELS, 10, seed, alpha_1=alpha_1, alpha_2=alpha_2)
      sizes = np.array([part.size for part in parts], dtype=np.float64)
      size_cv.append(sizes.std() / sizes.mean())
      entropy.append(np.mean([_entropy(_class_counts(part)) for part in parts[:-1]]))
    return float(np.mean(size_cv)), float(np.mean(entropy))

  # alpha_1 multiplies the prior 1/m: alpha_1 = m (the paper's) is a flat Dir(1, ..., 1).
  cv_skewed, _ = stats(alpha_1=10.0, alpha_2=1000.0)
  cv_even, _ = stats(alpha_1=1e4, alpha_2=1000.0)
  _, h_skewed = stats(alpha_1=1000.0, alpha_2=0.1)
  _, h_mixed = stats(alpha_1=1000.0, alpha_2=10.0)
  # Dir(1, ..., 1) sizes have coefficient of variation ~ sqrt((m - 1) / (m + 1)) ~ 0.9.
  assert cv_skewed > 0.6 and cv_even < 0.1
  # Larger alpha_2 -> class mixes closer to the uniform prior (entropy -> log 10 ~ 2.30).
  assert h_skewed < 0.5 and h_mixed > 1.8
  _, h_paper = stats(alpha_1=10.0, alpha_2=0.5)
  assert h_skewed < h_paper < h_mixed


def test_dual_dirichlet_near_iid_for_large_concentrations() -> None:
  parts = partition.dual_dirichlet(LABELS, 10, 0, alpha_1=1e6, alpha_2=1e6)
  for part in parts[:-1]:
    assert abs(part.size - LABELS.size / 10) < 0.02 * LABELS.size / 10
    counts = _class_counts(part)
    assert counts.min() > 0.8 * counts.mean()
  # The last client also gets every class's rounding remainder: < m - 1 = 9 per class.
  assert 0 <= parts[-1].size - LABELS.size / 10 < 0.02 * LABELS.size / 10 + 9 * NUM_CLASSES


@pytest.mark.parametrize('method', METHODS)
def test_min_client_size_is_respected(method: str) -> None:
  for seed in range(5):
    parts = FUNCTIONS[method](LABELS, 20, seed, min_client_size=50)
    assert min(part.size for part in parts) >= 50


@pytest.mark.parametrize(
  'method, settings, name',
  [
    ('class', {'classes_per_client': (0, 3)}, 'classes_per_client'),
    ('class', {'classes_per_client': (4, 3)}, 'classes_per_client'),
    ('class', {'classes_per_client': (3, 11)}, 'classes_per_client'),
    ('class', {'classes_per_client': 'three'}, 'classes_per_client'),
    ('class', {'classes_per_client': (1.5, 3)}, 'classes_per_client'),
    ('class', {'mean': 0.0}, 'mean'),
    ('class', {'mean': math.nan}, 'mean'),
    ('class', {'std': -1.0}, 'std'),
    ('class', {'std': math.inf}, 'std'),
    ('class', {'min_client_size': -1}, 'min_client_size'),
    ('class', {'min_client_size': 601}, 'min_client_size'),
    ('class', {'max_attempts': 0}, 'max_attempts'),
    ('dual_dirichlet', {'alpha_1': 0.0}, 'alpha_1'),
    ('dual_dirichlet', {'alpha_1': math.inf}, 'alpha_1'),
    ('dual_dirichlet', {'alpha_2': -0.5}, 'alpha_2'),
    ('dual_dirichlet', {'alpha_2': True}, 'alpha_2'),
    ('dual_dirichlet', {'min_client_size': 601}, 'min_client_size'),
    ('dual_dirichlet', {'max_attempts': 0}, 'max_attempts'),
  ],
)
def test_invalid_settings_raise(method: str, settings: dict, name: str) -> None:
  with pytest.raises(ValueError, match=name):
    FUNCTIONS[method](LABELS, 10, 0, **settings)


def test_impossible_or_unmet_requirements_raise() -> None:
  # 2 clients x at most 3 classes cannot cover 10 classes.
  with pytest.raises(ValueError, match='classes_per_client'):
    partition.class_partition(LABELS, 2, 0, classes_per_client=(1, 3))
  with pytest.raises(ValueError, match='max_attempts'):
    partition.class_partition(LABELS, 5, 0, classes_per_client=2, max_attempts=1)
  with pytest.raises(ValueError, match='min_client_size'):
    partition.dual_dirichlet(
      LABELS, 20, 0, alpha_1=0.05, alpha_2=0.5, min_client_size=290, max_attempts=5
    )
  for method in METHODS:
    with pytest.raises(ValueError, match='num_clients'):
      partition.partition(method, LABELS[:3], 5, seed=0)
    with pytest.raises(ValueError, match='labels'):
      partition.partition(method, LABELS.astype(np.float32), 5, seed=0)
