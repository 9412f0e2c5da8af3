"""Tests of CC-FedAvg's partitioners: `gamma_mix` (cross-silo) and `two_classes` (cross-device)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim_jax.data import partitioners as partition

NUM_CLASSES = 10
# Balanced labels in shuffled order, 200 per class (CIFAR-10-like, scaled down).
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_CLASSES), 200))


def _histograms(parts: list[np.ndarray]) -> np.ndarray:
  return np.stack([np.bincount(LABELS[p], minlength=NUM_CLASSES) for p in parts])


def _check_cover(parts: list[np.ndarray], num_clients: int) -> None:
  assert len(parts) == num_clients
  for part in parts:
    assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
  assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(LABELS.size))


@pytest.mark.parametrize('gamma', [0.0, 0.1, 0.5, 1.0])
def test_gamma_mix_covers_every_example_once(gamma: float) -> None:
  parts = partition.gamma_mix(LABELS, 8, gamma=gamma, seed=1)
  _check_cover(parts, 8)
  sizes = [p.size for p in parts]
  assert max(sizes) - min(sizes) <= 2  # one from each pool's array_split.


def test_gamma_zero_is_label_sorted_contiguous_blocks() -> None:
  parts = partition.gamma_mix(LABELS, 8, gamma=0.0, seed=1)
  hist = _histograms(parts)
  # 10 classes over 8 clients: 250 examples = 1.25 classes each, in label order.
  assert all(p.size == 250 for p in parts)
  for i in range(7):
    assert LABELS[parts[i]].max() <= LABELS[parts[i + 1]].min()
  assert all(1 <= np.count_nonzero(h) <= 2 for h in hist)
  np.testing.assert_array_equal(hist[0], [200, 50] + [0] * 8)
  np.testing.assert_array_equal(hist[1], [0, 150, 100] + [0] * 7)


def test_gamma_mix_iid_share() -> None:
  hist = _histograms(partition.gamma_mix(LABELS, 8, gamma=0.1, seed=2))
  # 20 of each class go to the IID pool (200, 25 per client); 1800 stay sorted (225 per
  # client, a contiguous run over at most 3 classes of 180).
  assert hist.sum() == LABELS.size and np.all(hist.sum(axis=1) == 250)
  assert all(np.count_nonzero(h) >= 5 for h in hist)  # IID examples add other classes.
  assert all(np.sort(h)[-3:].sum() >= 225 for h in hist)  # the sorted block dominates.


def test_gamma_one_is_near_iid() -> None:
  hist = _histograms(partition.gamma_mix(LABELS, 8, gamma=1.0, seed=3))
  assert np.all(hist > 0)
  expected = 250 / NUM_CLASSES
  assert np.abs(hist - expected).max() < 20  # binomial sd ~ 4.7


def test_gamma_mix_deterministic_by_seed() -> None:
  first = partition.gamma_mix(LABELS, 8, gamma=0.2, seed=5)
  again = partition.gamma_mix(LABELS, 8, gamma=0.2, seed=5)
  other = partition.gamma_mix(LABELS, 8, gamma=0.2, seed=6)
  assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize('gamma', [-0.1, 1.5, float('nan'), True])
def test_gamma_mix_invalid_gamma_raises(gamma: float) -> None:
  with pytest.raises(ValueError, match='gamma'):
    partition.gamma_mix(LABELS, 8, gamma=gamma, seed=0)


def test_two_classes_per_client() -> None:
  parts = partition.two_classes_per_client(LABELS, 100, seed=4)
  _check_cover(parts, 100)
  hist = _histograms(parts)
  # 200 shards of 10, 20 per class (boundaries on class boundaries): <= 2 classes each.
  assert all(p.size == 20 for p in parts)
  assert all(1 <= np.count_nonzero(h) <= 2 for h in hist)
  assert np.mean([np.count_nonzero(h) == 2 for h in hist]) > 0.8
  assert np.all((hist % 10) == 0)


def test_two_classes_is_shards_with_two_per_client() -> None:
  ours = partition.partition('two_classes', LABELS, 50, seed=7)
  theirs = partition.shards(LABELS, 50, shards_per_client=2, seed=7)
  assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_registry_names() -> None:
  assert partition.PARTITIONERS.get('gamma_mix').settings is partition.GammaMixSettings
  assert partition.PARTITIONERS.get('two_classes').settings is partition.TwoClassesSettings
  parts = partition.partition('gamma_mix', LABELS, 4, seed=0, gamma=0.5)
  _check_cover(parts, 4)
