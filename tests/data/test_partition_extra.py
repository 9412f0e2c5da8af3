"""Natural, balanced-Dirichlet, straggler-domain and budget-skewed partitions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim_jax.data import partitioners as partition

NUM_CLASSES = 10
# FMNIST-like balance, scaled down: 600 examples per class in shuffled order.
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_CLASSES), 600))
BETA_4 = np.repeat([1.0, 0.5, 0.25, 0.125], 25)  # CC-FedAvg's beta = 4 levels, N = 100


def _assert_cover_once(parts: list[np.ndarray], num_examples: int) -> None:
  for part in parts:
    assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
  assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(num_examples))


def _classes(parts: list[np.ndarray], clients) -> set[int]:
  return set(np.unique(LABELS[np.concatenate([parts[c] for c in clients])]).tolist())


# --- natural -------------------------------------------------------------------------------


def test_natural_hand_case() -> None:
  ids = np.array(['bob', 'al', 'bob', 'cy', 'al', 'bob'])
  parts, kept = partition.natural(ids)
  assert kept.tolist() == ['al', 'bob', 'cy']
  assert [p.tolist() for p in parts] == [[1, 4], [0, 2, 5], [3]]
  parts, kept = partition.natural(ids, min_client_size=2)
  assert kept.tolist() == ['al', 'bob'] and [p.tolist() for p in parts] == [[1, 4], [0, 2, 5]]


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 30), min_size=1, max_size=200), min_size=st.integers(0, 6))
def test_natural_properties(ids: list[int], min_size: int) -> None:
  ids = np.array(ids)
  counts = np.bincount(ids)
  if counts.max() < min_size:
    with pytest.raises(ValueError, match='min_client_size'):
      partition.natural(ids, min_client_size=min_size)
    return
  parts, kept = partition.natural(ids, min_client_size=min_size)
  assert np.all(np.diff(kept) > 0)  # ordered by id
  dropped = np.setdiff1d(np.unique(ids), kept)
  assert np.all(counts[dropped] < min_size)  # only small clients are dropped...
  for part, client in zip(parts, kept, strict=True):
    assert part.size >= min_size and np.all(ids[part] == client)  # ...and none is clamped
    assert np.array_equal(part, np.flatnonzero(ids == client))
  assert sum(p.size for p in parts) == np.isin(ids, kept).sum()


# --- Dirichlet balance --------------------------------------------------------------------


def test_dirichlet_default_unchanged_by_balance_setting() -> None:
  plain = partition.dirichlet(LABELS, 20, 0.3, seed=5, min_client_size=1)
  explicit = partition.dirichlet(LABELS, 20, 0.3, seed=5, min_client_size=1, balance=False)
  assert all(np.array_equal(a, b) for a, b in zip(plain, explicit, strict=True))


def _reference_balanced_dirichlet(labels, num_clients, alpha, seed):
  """The FedMA/MOON `partition_data` loop, written independently (one accepted draw)."""
  rng = np.random.default_rng(seed)
  n = labels.size
  batches = [[] for _ in range(num_clients)]
  for k in np.unique(labels):
    idx_k = np.flatnonzero(labels == k)
    proportions = rng.dirichlet(np.repeat(alpha, num_clients))
    proportions = np.array([p * (len(b) < n / num_clients) for p, b in zip(proportions, batches)])
    proportions = proportions / proportions.sum()
    cuts = (np.cumsum(proportions) * len(idx_k)).astype(int)[:-1]
    for b, piece in zip(batches, np.split(rng.permutation(idx_k), cuts)):
      b.extend(piece.tolist())
  return [np.sort(np.array(b, np.int64)) for b in batches]


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_dirichlet_balance_matches_reference_loop(seed: int) -> None:
  ours = partition.dirichlet(LABELS, 10, 0.5, seed=seed, min_client_size=0, balance=True)
  reference = _reference_balanced_dirichlet(LABELS, 10, 0.5, seed)
  assert all(np.array_equal(a, b) for a, b in zip(ours, reference, strict=True))


def test_dirichlet_balance_caps_sizes() -> None:
  n, k = LABELS.size, 20
  balanced = partition.dirichlet(LABELS, k, 0.1, seed=0, min_client_size=1, balance=True)
  plain = partition.dirichlet(LABELS, k, 0.1, seed=0, min_client_size=1)
  _assert_cover_once(balanced, n)
  # A client stops receiving once it holds N/K, so it ends below N/K + one class.
  assert max(p.size for p in balanced) < n / k + 600
  assert np.std([p.size for p in balanced]) < np.std([p.size for p in plain])


# --- straggler-domain split ---------------------------------------------------------------


def test_straggler_split_hand_case() -> None:
  labels = np.array([0, 1, 5, 6, 0, 0, 7, 1, 9])
  base = [np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([6, 7, 8])]
  # Straggler-class (0-4) counts: 2, 2, 1 -> one straggler: client 0 (tie to the lower index).
  parts, mask = partition.straggler_domain_split(labels, base, [0, 1, 2, 3, 4], 1)
  assert mask.tolist() == [True, False, False]
  assert [p.tolist() for p in parts] == [[0, 1, 2], [3], [6, 8]]  # 4, 5, 7 removed, not moved
  parts, mask = partition.straggler_domain_split(labels, base, [5, 6], None)
  assert mask.tolist() == [True, True, False]
  assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


@settings(max_examples=25, deadline=None)
@given(
  seed=st.integers(0, 10_000),
  num_stragglers=st.integers(1, 12),
  alpha=st.sampled_from([0.1, 0.5, 5.0]),
)
def test_straggler_split_properties(seed: int, num_stragglers: int, alpha: float) -> None:
  straggler_classes = [0, 1, 2, 3, 4]
  base = partition.dirichlet(LABELS, 40, alpha, seed=seed, min_client_size=1)
  is_straggler_class = np.isin(LABELS, straggler_classes)
  counts = np.array([is_straggler_class[p].sum() for p in base])
  parts, mask = partition.straggler_domain_split(LABELS, base, straggler_classes, num_stragglers)
  assert mask.sum() == num_stragglers and len(parts) == len(base)
  # The stragglers are the clients with the most straggler-class examples.
  assert counts[mask].min() >= counts[~mask].max()
  kept = np.concatenate(parts)
  assert np.unique(kept).size == kept.size  # still disjoint
  for part, original, straggler in zip(parts, base, mask, strict=True):
    if straggler:
      assert np.array_equal(part, original)  # stragglers keep everything
    else:
      assert not is_straggler_class[part].any()  # standard clients hold no straggler class
      assert np.array_equal(part, original[~is_straggler_class[original]])
  # Every straggler-class example that remains is on a straggler; none was reassigned.
  remaining = kept[is_straggler_class[kept]]
  on_stragglers = np.concatenate([p for p, s in zip(parts, mask) if s])
  straggler_examples_on_stragglers = on_stragglers[is_straggler_class[on_stragglers]]
  assert np.array_equal(np.sort(remaining), np.sort(straggler_examples_on_stragglers))
  assert kept.size == LABELS.size - counts[~mask].sum()


def test_straggler_split_is_deterministic_and_accepts_natural_base() -> None:
  writers = np.random.default_rng(3).integers(0, 50, LABELS.size)
  base, _ = partition.natural(writers)
  first = partition.straggler_domain_split(LABELS, base, [0, 1, 2, 3, 4], 10)
  again = partition.straggler_domain_split(LABELS, base, [0, 1, 2, 3, 4], 10)
  assert np.array_equal(first[1], again[1])
  assert all(np.array_equal(a, b) for a, b in zip(first[0], again[0], strict=True))


@pytest.mark.parametrize(
  ('kwargs', 'setting'),
  [
    ({'straggler_classes': [], 'num_stragglers': 1}, 'straggler_classes'),
    ({'straggler_classes': [42], 'num_stragglers': 1}, 'straggler_classes'),
    ({'straggler_classes': [0], 'num_stragglers': 0}, 'num_stragglers'),
    ({'straggler_classes': [0], 'num_stragglers': 3}, 'num_stragglers'),  # 2 holders
    ({'straggler_classes': [0], 'num_stragglers': 1, 'min_client_size': 2}, 'min_client_size'),
  ],
)
def test_straggler_split_invalid_settings(kwargs, setting: str) -> None:
  labels = np.array([0, 1, 0, 1, 1])
  base = [np.array([0, 1]), np.array([2, 3]), np.array([4])]
  with pytest.raises(ValueError) as info:
    partition.straggler_domain_split(labels, base, **kwargs)
  message = str(info.value)
  assert setting in message and 'allowed' in message and '\n' not in message


# --- budget-correlated classes (CC-FedAvg Tables II, IV, V) -------------------------------


@pytest.mark.parametrize('skew', partition.BUDGET_SKEWS)
def test_budget_skewed_covers_and_is_deterministic(skew: str) -> None:
  run = lambda seed: partition.partition(
    'budget_skewed', LABELS, 100, seed=seed, budgets=BETA_4, budget_skew=skew
  )
  first, again, other = run(1), run(1), run(2)
  _assert_cover_once(first, LABELS.size)
  assert {p.size for p in first} == {60}  # 200 shards of 30, 2 per client
  assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
  for part in first:
    assert np.unique(LABELS[part]).size <= 2  # shard boundaries fall on class boundaries


def test_budget_skewed_none_is_random_shards() -> None:
  ours = partition.budget_skewed(LABELS, 100, 4, budgets=BETA_4, skew='none')
  assert all(
    np.array_equal(a, b)
    for a, b in zip(ours, partition.shards(LABELS, 100, 2, seed=4), strict=True)
  )


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_budget_skewed_high_five_levels_is_the_papers_setting(seed: int) -> None:
  # Appendix D: two classes per 20 clients, the same p_i for the same class.
  budgets = np.random.default_rng(seed).permutation(np.repeat([1, 0.5, 0.25, 0.125, 0.0625], 20))
  parts = partition.budget_skewed(LABELS, 100, seed, budgets=budgets, skew='high')
  seen: set[int] = set()
  for level in np.unique(budgets):
    held = _classes(parts, np.flatnonzero(budgets == level))
    assert len(held) == 2 and not held & seen  # each class on exactly one level
    seen |= held
  for part in parts:
    assert np.unique(LABELS[part]).size == 2


def test_budget_skewed_high_beta_4_shares_only_boundary_classes() -> None:
  parts = partition.budget_skewed(LABELS, 100, 0, budgets=BETA_4, skew='high')
  levels = [_classes(parts, np.flatnonzero(BETA_4 == p)) for p in (1.0, 0.5, 0.25, 0.125)]
  # 25 clients x 2 shards = 2.5 classes' worth per level, spread over 4 classes.
  assert [len(held) for held in levels] == [4, 4, 4, 4]
  for a in range(4):
    for b in range(a + 1, 4):
      assert len(levels[a] & levels[b]) == (2 if b == a + 1 else 0)
  counts = [
    np.bincount(
      LABELS[np.concatenate([parts[c] for c in np.flatnonzero(BETA_4 == p)])], minlength=NUM_CLASSES
    )
    for p in (1.0, 0.5, 0.25, 0.125)
  ]
  # The top and bottom levels hold 2 classes whole; the other 6 classes straddle two levels.
  assert [int(np.sum(c == 600)) for c in counts] == [2, 0, 0, 2]
  assert sum(int(np.sum((c > 0) & (c < 600))) for c in counts) == 12


def test_budget_skewed_moderate_puts_the_skewed_clients_on_adequate_budgets() -> None:
  parts = partition.budget_skewed(LABELS, 100, 3, budgets=BETA_4, skew='moderate')
  held = [frozenset(np.unique(LABELS[p]).tolist()) for p in parts]
  # The 10 skewed clients take shards r and 199 - r (r < 10): all hold the same two classes,
  # the halves of the first and last class of the (random) class order.
  pair, count = Counter(held).most_common(1)[0]
  assert len(pair) == 2 and count >= 10
  adequate_owners = [c for c in range(100) if held[c] == pair and BETA_4[c] == 1.0]
  assert len(adequate_owners) >= 10
  on_owners = np.concatenate([parts[c] for c in adequate_owners])
  for k in pair:
    assert np.sum(LABELS[on_owners] == k) >= 300


@pytest.mark.parametrize(
  ('kwargs', 'setting'),
  [
    ({'budgets': BETA_4[:50]}, 'budgets'),
    ({'budgets': np.full(100, np.nan)}, 'budgets'),
    ({'budgets': BETA_4, 'skew': 'extreme'}, 'skew'),
    ({'budgets': BETA_4, 'skew': 'moderate', 'skewed_fraction': 0.3}, 'skewed_fraction'),
    ({'budgets': BETA_4, 'skew': 'moderate', 'skewed_fraction': 0.001}, 'skewed_fraction'),
    ({'budgets': BETA_4, 'shards_per_client': 0}, 'shards_per_client'),
  ],
)
def test_budget_skewed_invalid_settings(kwargs, setting: str) -> None:
  with pytest.raises(ValueError) as info:
    partition.budget_skewed(LABELS, 100, 0, **kwargs)
  message = str(info.value)
  assert setting in message and 'allowed' in message and '\n' not in message


def test_dirichlet_balance_invalid() -> None:
  with pytest.raises(ValueError, match='balance=.*allowed'):
    partition.dirichlet(LABELS, 5, 1.0, 0, balance='yes')
