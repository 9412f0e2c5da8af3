"""Tests of CC-FedAvg's computation budgets and training schedules."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim_jax.algorithms.ccfedavg import budgets as B


def _rng(seed: int = 0) -> np.random.Generator:
  return np.random.default_rng(seed)


# Budget rules.


def test_beta_levels_paper_example() -> None:
  np.testing.assert_array_equal(B.beta_levels(8, 4), [1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125])


def test_beta_levels_three_groups_and_ceil_full_budget() -> None:
  p = B.beta_levels(30, 3)  # Sec. VI-A: 3 equal groups train 1, 0.5, 0.25 of the rounds.
  np.testing.assert_array_equal(p, np.repeat([1.0, 0.5, 0.25], 10))
  p = B.beta_levels(10, 4)  # ceil(N / beta) = 3 clients with p = 1.
  assert np.sum(p == 1) == 3 and p.min() == 0.125 and np.all(np.diff(p) <= 0)
  np.testing.assert_array_equal(B.beta_levels(5, 1), np.ones(5))


def test_beta_levels_random_assignment_is_a_permutation() -> None:
  ordered = B.beta_levels(100, 4)
  shuffled = B.beta_levels(100, 4, rng=_rng(1))
  assert not np.array_equal(ordered, shuffled)
  np.testing.assert_array_equal(np.sort(shuffled), np.sort(ordered))
  np.testing.assert_array_equal(shuffled, B.beta_levels(100, 4, rng=_rng(1)))


def test_two_group_budgets() -> None:
  np.testing.assert_array_equal(B.two_group_budgets(8, 0.25, 4), [0.25, 0.25, 1, 1, 1, 1, 1, 1])
  np.testing.assert_array_equal(
    B.two_group_budgets(8, 0.25, 4, constrained_first=False), [1, 1, 1, 1, 1, 1, 0.25, 0.25]
  )
  assert np.sum(B.two_group_budgets(100, 0.29, 2) == 0.5) == 29  # 0.29 * 100 = 28.999...
  assert np.sum(B.two_group_budgets(10, 0.25, 2) == 0.5) == 3  # 2.5 rounds half up.
  np.testing.assert_array_equal(B.two_group_budgets(8, 0.0, 16), np.ones(8))
  np.testing.assert_array_equal(B.two_group_budgets(8, 0.75, 1), np.ones(8))
  shuffled = B.two_group_budgets(20, 0.5, 8, rng=_rng(2))
  assert np.sum(shuffled == 0.125) == 10 and not np.all(shuffled[:10] == 0.125)


def test_uniform_budgets() -> None:
  np.testing.assert_array_equal(B.uniform_budgets(4, 8), np.full(4, 0.125))
  np.testing.assert_array_equal(B.two_group_budgets(6, 1.0, 4), B.uniform_budgets(6, 4))


@pytest.mark.parametrize(
  ('call', 'setting'),
  [
    (lambda: B.beta_levels(0, 4), 'num_clients'),
    (lambda: B.beta_levels(8, 0), 'beta'),
    (lambda: B.beta_levels(8, 2.0), 'beta'),
    (lambda: B.beta_levels(8, 4, rng=0), 'rng'),
    (lambda: B.two_group_budgets(8, 1.5, 4), 'r'),
    (lambda: B.two_group_budgets(8, 0.5, 0), 'w'),
    (lambda: B.uniform_budgets(8, 0), 'w'),
    (lambda: B.check_budgets([0.5, 0.0]), 'budgets'),
    (lambda: B.check_budgets([1.5]), 'budgets'),
  ],
)
def test_invalid_budget_settings_raise(call, setting: str) -> None:
  with pytest.raises(ValueError, match=setting):
    call()


# Schedules.

P = np.array([1.0, 0.5, 0.25, 0.125])


def _row(mask: np.ndarray, client: int) -> str:
  return ''.join('x' if m else '.' for m in mask[:, client])


def test_round_robin_zero_phase_mask() -> None:
  mask = B.RoundRobinSchedule(P).mask(16)
  assert [_row(mask, i) for i in range(4)] == [
    'xxxxxxxxxxxxxxxx',
    'x.x.x.x.x.x.x.x.',
    'x...x...x...x...',
    'x.......x.......',
  ]


def test_round_robin_random_phase() -> None:
  schedule = B.RoundRobinSchedule(np.full(64, 0.125), phase='random', rng=_rng(3))
  mask = schedule.mask(16)
  assert np.all(mask.sum(axis=0) == 2)  # exactly once every 8 rounds.
  first = mask.argmax(axis=0)
  np.testing.assert_array_equal(first, (8 - schedule.phases) % 8)
  assert len(set(first.tolist())) > 4  # de-synchronised.
  again = B.RoundRobinSchedule(np.full(64, 0.125), phase='random', rng=_rng(3))
  np.testing.assert_array_equal(again.phases, schedule.phases)


def test_round_robin_rejects_non_integer_period_and_bad_phase() -> None:
  with pytest.raises(ValueError, match='1/p_i an integer'):
    B.RoundRobinSchedule(np.array([1.0, 0.4]))
  B.RoundRobinSchedule(np.array([1 / 3, 1 / 7]))  # float 1/p round-trips fine.
  with pytest.raises(ValueError, match='phase'):
    B.RoundRobinSchedule(P, phase='late')
  with pytest.raises(ValueError, match='rng'):
    B.RoundRobinSchedule(P, phase='random')


def test_synchronised_mask() -> None:
  schedule = B.SynchronisedSchedule(4, num_clients=3)
  mask = schedule.mask(16)
  assert all(_row(mask, i) == 'x...x...x...x...' for i in range(3))
  assert B.SynchronisedSchedule(4).trains(1000, 8, True)  # no num_clients needed for trains.
  assert not B.SynchronisedSchedule(4).trains(1000, 9, True)
  with pytest.raises(ValueError, match='num_clients'):
    B.SynchronisedSchedule(4).mask(3)


def test_quota_cut_off() -> None:
  mask = B.QuotaSchedule(P, total_rounds=16).mask(16)
  assert [_row(mask, i) for i in range(4)] == [
    'xxxxxxxxxxxxxxxx',
    'xxxxxxxx........',
    'xxxx............',
    'xx..............',
  ]
  # Paper: T = 400, p = 0.5 drops out after 200 rounds of training.
  assert B.QuotaSchedule(np.array([0.5]), 400).mask(400).sum() == 200
  # The authors' code (p_i * T >= t) trains one round more.
  assert B.QuotaSchedule(np.array([0.5]), 400, inclusive=True).mask(400).sum() == 201
  quota = B.QuotaSchedule(P, total_rounds=16)
  assert not quota.trains(3, 2, has_trained_before=False)  # past quota: history is irrelevant.
  assert B.QuotaSchedule(np.array([0.3]), 10).mask(10).sum() == 3


def test_ad_hoc_frequency_matches_budgets() -> None:
  budgets = np.array([1.0, 0.5, 0.25, 0.125])
  mask = B.AdHocSchedule(budgets, _rng(4)).mask(4000)
  frequency = mask.mean(axis=0)
  assert frequency[0] == 1.0
  np.testing.assert_allclose(frequency[1:], budgets[1:], atol=0.025)


def test_ad_hoc_deterministic_and_order_independent() -> None:
  budgets = np.full(10, 0.5)
  first = B.AdHocSchedule(budgets, _rng(5))
  again = B.AdHocSchedule(budgets, _rng(5))
  other = B.AdHocSchedule(budgets, _rng(6))
  backwards = [[again.trains(i, t, True) for i in range(10)] for t in reversed(range(20))]
  np.testing.assert_array_equal(first.mask(20), np.array(backwards[::-1]))
  assert not np.array_equal(first.mask(20), other.mask(20))


def test_ad_hoc_first_selection_trains() -> None:
  budgets = np.full(200, 0.125)
  forced = B.AdHocSchedule(budgets, _rng(7))
  strict = B.AdHocSchedule(budgets, _rng(7), first_selection_trains=False)
  assert all(forced.trains(i, 5, has_trained_before=False) for i in range(200))
  decisions = [strict.trains(i, 5, has_trained_before=False) for i in range(200)]
  assert 0 < sum(decisions) < 100
  assert decisions == [forced.trains(i, 5, has_trained_before=True) for i in range(200)]


def test_training_mask_applies_selection_and_history() -> None:
  schedule = B.AdHocSchedule(np.full(3, 0.125), _rng(8))
  selected = np.zeros((6, 3), dtype=bool)
  selected[2:, 0] = True  # client 0 first selected in round 2.
  selected[:, 1] = True
  out = B.training_mask(schedule, selected)
  assert not out[:, 2].any()  # never selected, never trains.
  assert out[0, 1] and out[2, 0] and not out[:2, 0].any()  # first selection trains.
  raw = schedule.mask(6)
  np.testing.assert_array_equal(out[3:, 0], raw[3:, 0])
  np.testing.assert_array_equal(out[1:, 1], raw[1:, 1])
  rr = B.RoundRobinSchedule(np.full(2, 0.5))
  odd = np.zeros((4, 2), dtype=bool)
  odd[1::2] = True  # strict round-robin: selected only on odd rounds, never trains.
  assert not B.training_mask(rr, odd).any()


def test_make_schedule() -> None:
  assert isinstance(B.make_schedule('ad_hoc', P, _rng()), B.AdHocSchedule)
  rr = B.make_schedule('round_robin', P, _rng(), phase='random')
  assert isinstance(rr, B.RoundRobinSchedule) and rr.phase == 'random'
  sync = B.make_schedule('synchronised', B.uniform_budgets(5, 4), None)
  assert sync.w == 4 and sync.num_clients == 5
  assert B.make_schedule('synchronised', P, None, w=2).w == 2
  quota = B.make_schedule('quota', P, None, total_rounds=16)
  assert isinstance(quota, B.QuotaSchedule)
  assert set(B.SCHEDULES) == {'ad_hoc', 'round_robin', 'synchronised', 'quota'}


@pytest.mark.parametrize(
  ('call', 'setting'),
  [
    (lambda: B.make_schedule('fixed', P, None), 'schedule'),
    (lambda: B.make_schedule('quota', P, None), 'total_rounds'),
    (lambda: B.make_schedule('synchronised', P, None), 'w'),
    (lambda: B.make_schedule('ad_hoc', P, None), 'rng'),
    (lambda: B.QuotaSchedule(P, 0), 'total_rounds'),
    (lambda: B.SynchronisedSchedule(0), 'w'),
    (lambda: B.RoundRobinSchedule(P).trains(4, 0, True), 'client'),
    (lambda: B.RoundRobinSchedule(P).trains(0, -1, True), 'round_index'),
    (lambda: B.training_mask(B.RoundRobinSchedule(P), np.ones((3, 5), bool)), 'selected'),
  ],
)
def test_invalid_schedule_settings_raise(call, setting: str) -> None:
  with pytest.raises(ValueError, match=setting):
    call()
