"""FedASMU's fetch timing (Sec. 4, Formulas 5-6, Alg. 2, appendix H1-H3): hand-computed Q-table
updates, ε-greedy extremes, REINFORCE's direction and baseline, the valid range, determinism."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim_jax import experiment
from fedsim_jax.algorithms.fedasmu import FedasmuSettings
from fedsim_jax.algorithms.fedasmu.fetch import (
  ACTIONS,
  FIXED_FETCH_PRESETS,
  FixedFetch,
  LearnedFetch,
  MetaSpec,
  QTable,
  reinforce_update,
  slot_log_probs,
)
from fedsim_jax.config import ConfigError, fedasmu_fashion_mnist_config, fedasmu_trigger

ADD, STAY, MINUS = (ACTIONS.index(name) for name in ('add', 'stay', 'minus'))


# --- FixedFetch: the ablation's heuristics ---------------------------------------------------


@pytest.mark.parametrize(
  'num_epochs, h1, h2, h3',
  [
    (2, 1, 1, 1),  # a single valid slot
    (5, 1, 3, 4),  # middle of 5 epochs: 2.5, rounded up
    (10, 1, 5, 9),  # after the 1st, the 5th (middle), the 9th (last but one) epoch
    (20, 1, 10, 19),
  ],
)
def test_fixed_fetch_presets(num_epochs, h1, h2, h3):
  got = [FixedFetch.preset(name).propose(0, num_epochs) for name in ('h1', 'h2', 'h3')]
  assert got == [h1, h2, h3]
  assert FIXED_FETCH_PRESETS == {'h1': 0.0, 'h2': 0.5, 'h3': 1.0}


def test_fixed_fetch_rejects_bad_values():
  with pytest.raises(ValueError, match='fraction'):
    FixedFetch(1.5)
  with pytest.raises(ValueError, match='num_epochs'):
    FixedFetch(0.5).propose(0, 1)


# --- Q-table (Formula 6) ----------------------------------------------------------------------


def test_q_update_formula6_hand_computed():
  # φ = 0.5, ψ = 0.9, state 2 of slots 1..3 (all three actions valid).
  table = QTable(learning_rate=0.5, discount=0.9, bootstrap='same')
  table.row(2)[:] = [0.2, 1.0, -0.4]
  # 𝓗(2, minus) = -0.4 + 0.5 (0.3 + 0.9 max(0.2, 1.0, -0.4) - (-0.4)) = -0.4 + 0.5 * 1.6 = 0.4
  assert table.update(2, MINUS, 0.3, next_state=1, num_slots=3) == pytest.approx(0.4)
  np.testing.assert_allclose(table.row(2), [0.2, 1.0, 0.4])
  # 𝓗(2, add) = 0.2 + 0.5 (-1 + 0.9 * 1.0 - 0.2) = 0.05
  assert table.update(2, ADD, -1.0, next_state=3, num_slots=3) == pytest.approx(0.05)


def test_q_update_repeated_stay():
  # num_slots = 1: only 'stay' is valid, so the max runs over it alone.
  table = QTable(learning_rate=0.5, discount=0.9)
  for reward, expected in [(1.0, 0.5), (2.0, 1.475), (-1.0, 0.90125)]:
    # 0 + 0.5 (1 + 0) = 0.5; 0.5 + 0.5 (2 + 0.45 - 0.5) = 1.475; 1.475 + 0.5 (-1 + 1.3275 - 1.475)
    assert table.update(1, STAY, reward, next_state=1, num_slots=1) == pytest.approx(expected)


def test_q_update_max_ignores_invalid_actions_and_next_bootstrap():
  same = QTable(learning_rate=1.0, discount=0.5, bootstrap='same')
  same.row(1)[:] = [0.0, 0.0, 10.0]  # 'minus' is invalid in state 1
  assert same.update(1, STAY, 1.0, next_state=1, num_slots=3) == pytest.approx(1.0)
  nxt = QTable(learning_rate=1.0, discount=0.5, bootstrap='next')
  nxt.row(3)[:] = [0.0, 4.0, 2.0]  # 'add' invalid in state 3 of 3
  # 𝓗(2, add) = 0 + 1 (1 + 0.5 * max_a 𝓗(3, a) - 0) = 1 + 0.5 * 4
  assert nxt.update(2, ADD, 1.0, next_state=3, num_slots=3) == pytest.approx(3.0)


def test_epsilon_zero_is_greedy_and_one_is_uniform():
  table = QTable(0.1, 0.9)
  table.row(3)[:] = [0.1, -0.2, 0.7]
  rng = np.random.default_rng(0)
  assert {table.choose(3, 5, 0.0, rng) for _ in range(50)} == {MINUS}
  # the best valid action: 'minus' is invalid in state 1
  table.row(1)[:] = [0.1, -0.2, 0.7]
  assert {table.choose(1, 5, 0.0, rng) for _ in range(50)} == {ADD}
  counts = np.bincount([table.choose(3, 5, 1.0, rng) for _ in range(3000)], minlength=3)
  np.testing.assert_allclose(counts / 3000, 1 / 3, atol=0.04)
  # at the upper boundary ε = 1 is uniform over the two valid actions
  counts = np.bincount([table.choose(5, 5, 1.0, rng) for _ in range(2000)], minlength=3)
  assert counts[ADD] == 0
  np.testing.assert_allclose(counts[[STAY, MINUS]] / 2000, 0.5, atol=0.05)


def test_meta_epsilon_one_is_uniform_over_slots():
  policy = LearnedFetch(3000, seed=0, epsilon=1.0)
  slots = [policy.propose(client, 5) for client in range(3000)]
  counts = np.bincount(slots, minlength=5)
  assert counts[0] == 0
  np.testing.assert_allclose(counts[1:] / 3000, 0.25, atol=0.035)


def test_meta_mode_with_epsilon_zero_is_deterministic():
  policy = LearnedFetch(20, seed=3, epsilon=0.0, meta_exploit='mode')
  best = int(np.argmax(policy.meta_probabilities(8))) + 1
  assert [policy.propose(client, 8) for client in range(20)] == [best] * 20


# --- Meta model (Formula 5) -------------------------------------------------------------------


def test_slot_distribution_is_a_stopping_time():
  spec = MetaSpec(hidden_size=4)
  params = LearnedFetch(1, seed=0, hidden_size=4).params
  log_probs = slot_log_probs(spec, params, jnp.asarray(6), 8)
  probs = np.exp(np.asarray(log_probs))
  assert np.all(probs[5:] == 0)  # slots 1..5 only
  assert probs[:5].sum() == pytest.approx(1.0, abs=1e-5)
  # the uniform hazard prior: a zero head output proposes every slot with probability 1/K
  zero = jax.tree_util.tree_map(jnp.zeros_like, params)
  np.testing.assert_allclose(
    np.exp(np.asarray(slot_log_probs(spec, zero, jnp.asarray(6), 8)))[:5], 0.2, atol=1e-6
  )
  # without the prior a zero output is a hazard of 1/2 per epoch: 1/2, 1/4, 1/8, 1/16, 1/16
  none = MetaSpec(hidden_size=4, hazard_prior='none')
  np.testing.assert_allclose(
    np.exp(np.asarray(slot_log_probs(none, zero, jnp.asarray(6), 8)))[:5],
    [0.5, 0.25, 0.125, 0.0625, 0.0625],
    atol=1e-6,
  )


@pytest.mark.parametrize('advantage', [1.0, -1.0])
def test_reinforce_step_moves_log_probability_with_the_advantage(advantage):
  policy = LearnedFetch(1, seed=1, hidden_size=8)
  before = np.log(policy.meta_probabilities(6)[2])
  policy.params = reinforce_update(policy.spec, policy.params, 6, 3, advantage, 0.05)
  after = np.log(policy.meta_probabilities(6)[2])
  assert (after - before) * advantage > 1e-3


def test_reinforce_learns_the_rewarded_epoch():
  # Every device's first fetch comes from θ; the reward favours fetching after epoch 2 of 4.
  num_clients = 200
  policy = LearnedFetch(
    num_clients, seed=0, hidden_size=8, learning_rate=1.0, epsilon=0.0, baseline_decay=0.1
  )
  start = policy.meta_probabilities(4)
  for client in range(num_clients):
    slot = policy.propose(client, 4)
    policy.observe(client, slot, 1.0 if slot == 2 else 0.0)
  end = policy.meta_probabilities(4)
  assert start[1] == pytest.approx(1 / 3, abs=0.05)
  assert end[1] > 0.8
  assert policy.meta_updates == num_clients


def test_moving_baseline_arithmetic_and_order():
  policy = LearnedFetch(
    3, seed=0, hidden_size=4, learning_rate=0.01, baseline_decay=0.2, baseline_init=0.5, epsilon=0.0
  )
  params = policy.params
  slot = policy.propose(0, 5)
  policy.observe(0, slot, 1.5)
  # Alg. 2 line 13 before line 14: b = 0.8 * 0.5 + 0.2 * 1.5 = 0.7, then R - b = 0.8.
  assert policy.baseline == pytest.approx(0.7)
  expected = reinforce_update(policy.spec, params, 5, slot, 0.8, 0.01)
  jax.tree_util.tree_map(np.testing.assert_allclose, policy.params, expected)
  slot = policy.propose(1, 5)
  policy.observe(1, slot, -1.0)
  assert policy.baseline == pytest.approx(0.8 * 0.7 - 0.2)  # 0.36
  # a Q-table reward moves b under scope 'all' ...
  slot = policy.propose(0, 5)
  policy.observe(0, slot, 2.0)
  assert policy.baseline == pytest.approx(0.8 * 0.36 + 0.4)
  assert policy.meta_updates == 2
  # ... and not under scope 'meta'
  meta_only = LearnedFetch(1, seed=0, hidden_size=4, baseline_decay=0.2, baseline_scope='meta')
  meta_only.observe(0, meta_only.propose(0, 5), 1.0)
  meta_only.observe(0, meta_only.propose(0, 5), 5.0)
  assert meta_only.baseline == pytest.approx(0.2)


# --- The device phases and the Q-table through the policy --------------------------------------


def test_device_switches_from_meta_model_to_its_q_table():
  policy = LearnedFetch(2, seed=0, hidden_size=4, epsilon=0.0, q_learning_rate=0.5, q_discount=0.9)
  first = policy.propose(0, 6)
  assert policy.q_table(0) is None
  policy.propose(0, 6)  # no reward yet (nothing newer): still the meta model
  first = policy.propose(0, 6)
  policy.observe(0, first, 0.3)
  table = policy.q_table(0)
  assert table is not None and policy.meta_updates == 1
  # From here l* moves by one action from the meta model's slot.
  second = policy.propose(0, 6)
  assert second - first in (1, 0, -1)
  action = (1, 0, -1).index(second - first)
  policy.observe(0, second, 1.0)
  assert table.row(first)[action] == pytest.approx(0.5)  # 0 + 0.5 (1 + 0.9 * 0 - 0)
  assert policy.meta_updates == 1


def test_observe_checks_the_pending_proposal():
  policy = LearnedFetch(2, seed=0, hidden_size=4)
  with pytest.raises(ValueError, match='fetch_epoch'):
    policy.observe(0, 1, 0.1)
  slot = policy.propose(0, 6)
  with pytest.raises(ValueError, match='fetch_epoch'):
    policy.observe(0, slot + 1 if slot < 5 else slot - 1, 0.1)
  with pytest.raises(ValueError, match='reward'):
    policy.observe(0, slot, float('nan'))
  with pytest.raises(ValueError, match='client'):
    policy.propose(2, 6)
  with pytest.raises(ValueError, match='num_epochs'):
    policy.propose(0, 1)


@settings(max_examples=25, deadline=None)
@given(
  st.lists(
    st.tuples(
      st.integers(0, 2), st.integers(2, 9), st.floats(-2, 2, allow_nan=False), st.booleans()
    ),
    min_size=1,
    max_size=25,
  ),
  st.sampled_from([0.0, 0.3, 1.0]),
)
def test_proposals_stay_in_the_valid_range(events, epsilon):
  policies = [
    LearnedFetch(3, seed=7, hidden_size=4, epsilon=epsilon, learning_rate=0.1),
    FixedFetch(0.0),
    FixedFetch(0.5),
    FixedFetch(1.0),
    FixedFetch(0.37),
  ]
  for policy in policies:
    for client, num_epochs, reward, rewarded in events:
      slot = policy.propose(client, num_epochs)
      assert isinstance(slot, int) and 1 <= slot <= num_epochs - 1
      if rewarded:
        policy.observe(client, slot, reward)


def _run(seed, steps=40):
  policy = LearnedFetch(5, seed=seed, hidden_size=4, epsilon=0.5, learning_rate=0.1)
  slots = []
  for k in range(steps):
    client = k % 5
    slot = policy.propose(client, 4 + k % 4)
    slots.append(slot)
    policy.observe(client, slot, float(np.sin(k)))
  return slots, policy


def test_same_seed_same_run_other_seed_other_run():
  slots_a, policy_a = _run(11)
  slots_b, policy_b = _run(11)
  slots_c, _ = _run(12)
  assert slots_a == slots_b
  jax.tree_util.tree_map(np.testing.assert_array_equal, policy_a.params, policy_b.params)
  assert policy_a.baseline == policy_b.baseline
  assert slots_a != slots_c


# --- Pre-training from history and the settings -----------------------------------------------


def test_pretraining_replays_history_through_formula5(tmp_path):
  _, source = _run(3, steps=12)
  path = str(tmp_path / 'history.npz')
  source.save_history(path)
  history = source.history_arrays()
  assert history['num_epochs'].shape == (12,)
  fresh = LearnedFetch(5, seed=1, hidden_size=4, learning_rate=0.1)
  manual = LearnedFetch(5, seed=1, hidden_size=4, learning_rate=0.1)
  manual.pretrain(history, passes=2)
  loaded = LearnedFetch(
    5, seed=1, hidden_size=4, learning_rate=0.1, pretrain_history=path, pretrain_passes=2
  )
  jax.tree_util.tree_map(np.testing.assert_allclose, loaded.params, manual.params)
  assert loaded.meta_updates == 24 and loaded.baseline == pytest.approx(manual.baseline)
  assert not np.allclose(loaded.meta_probabilities(6), fresh.meta_probabilities(6))
  np.savez(str(tmp_path / 'bad.npz'), num_epochs=np.array([4]))
  with pytest.raises(ValueError, match='pretrain_history'):
    LearnedFetch(5, seed=1, pretrain_history=str(tmp_path / 'bad.npz'))


def _make_fetch_policy(**kwargs):
  return FedasmuSettings.from_kwargs(kwargs).make_fetch_policy('fedasmu', 4, 0)


def test_make_fetch_policy_from_settings():
  assert isinstance(_make_fetch_policy(), LearnedFetch)
  assert _make_fetch_policy(fetch_policy='none') is None
  for name, fraction in FIXED_FETCH_PRESETS.items():
    policy = _make_fetch_policy(fetch_policy=name)
    assert isinstance(policy, FixedFetch) and policy.fraction == fraction
  policy = _make_fetch_policy(fetch_policy='learned', fetch_hidden_size=6, fetch_q_discount=0.5)
  assert policy.spec.hidden_size == 6 and policy.learning_rate == 0.001


@pytest.mark.parametrize(
  'field, value',
  [
    ('policy', 'h4'),
    ('hidden_size', 0),
    ('features', ('progress', 'speed')),
    ('features', ()),
    ('hazard_prior', 'flat'),
    ('learning_rate', 0.0),
    ('baseline_decay', 0.0),
    ('baseline_decay', 1.5),
    ('baseline_scope', 'device'),
    ('epsilon', 1.5),
    ('meta_exploit', 'max'),
    ('q_learning_rate', 0.0),
    ('q_discount', 1.0),
    ('q_bootstrap', 'last'),
    ('pretrain_passes', 0),
  ],
)
def test_validate_rejects_bad_fetch_settings(field, value):
  config = fedasmu_fashion_mnist_config('fedasmu', alpha=0.6, **fedasmu_trigger())
  experiment.validate(config)
  config.algorithm.kwargs[f'fetch_{field}'] = value
  with pytest.raises(ConfigError, match=f'algorithm.kwargs.fetch_{field}'):
    experiment.validate(config)
