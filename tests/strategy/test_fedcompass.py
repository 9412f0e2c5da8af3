"""FedCompass: the Compass scheduler's decisions on the paper's examples, its equilibrium group
bound, and its reduction to FedAsync."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.algorithms.fedasync import fedasync_delta
from fedsim_jax.algorithms.fedcompass import (
  VARIANTS,
  CompassScheduler,
  CompassSettings,
  compass_aggregator,
)
from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import Executor, NoTrainingExecutor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import Simulation, StopCondition, TaskLatency
from fedsim_jax.strategy import AsynchronousScheduler, LocalWork, make_staleness

PARAMS = {'w': jnp.zeros(2)}


class ScriptedLatency:
  """Fixed minutes per step per client; `overrides[(client, k)]` sets the k-th task's total
  duration (k = 0 is the warm-up task)."""

  def __init__(self, step_times, overrides=None):
    self.step_times = step_times
    self.overrides = overrides or {}
    self.tasks = {c: 0 for c in range(len(step_times))}
    self._pending = {}

  def expected_step_time(self, client):
    return self.step_times[client]

  def sample(self, client):
    k = self.tasks[client]
    self.tasks[client] += 1
    self._pending[client] = k
    return (
      TaskLatency(0.0, 0.0, self.step_times[client])
      if (client, k) not in self.overrides
      else _Fixed(self.overrides[(client, k)])
    )


class _Fixed(TaskLatency):
  """A task whose total duration is fixed whatever its steps (a scripted slowdown)."""

  def __new__(cls, total):
    obj = super().__new__(cls, 0.0, 0.0, 0.0)
    obj.total = total
    return obj

  def duration(self, num_steps):
    return self.total


def _compass_sim(step_times, overrides=None, q_min=20, q_max=100, lam=1.2, estimator='last'):
  scheduler = CompassScheduler(q_min, q_max, lam, weighting='uniform', speed_estimator=estimator)
  sim = Simulation(
    executor=NoTrainingExecutor(PARAMS),
    scheduler=scheduler,
    aggregator=compass_aggregator(),
    latency=ScriptedLatency(step_times, overrides),
    init_params=PARAMS,
    client_sizes=np.full(len(step_times), 10),
    rng=np.random.default_rng(0),
  )
  log = []
  dispatch = sim.dispatch

  def recording(client, steps, **kwargs):
    log.append((round(sim.now, 6), client + 1, steps, kwargs['metadata']['group']))
    return dispatch(client, steps, **kwargs)

  sim.dispatch = recording
  return sim, scheduler, log


# Figure 1's five clients run 10, 5, 4, 2.5 and 2 steps per minute (times in minutes).
FIGURE_1_STEP_TIMES = [0.1, 0.2, 0.25, 0.4, 0.5]


def test_figure_1_example_step_by_step():
  sim, scheduler, log = _compass_sim(FIGURE_1_STEP_TIMES)
  sim.run(StopCondition(max_virtual_time=33.0))
  assert log[:5] == [(0.0, c, 20, -1) for c in range(1, 6)]  # warm-up: Q_min
  # (time, client, Q, group): client 1 creates group 0 with Q_max (T_a = 12:00); clients 2
  # and 3 join it with 40 and 28 steps; client 4 would need 10 < Q_min, so it creates group 1
  # with T_a = 22:00 (= 12:00 + fastest member's 0.1 min x Q_max); client 5 joins group 1.
  assert log[5:10] == [
    (2.0, 1, 100, 0),
    (4.0, 2, 40, 0),
    (5.0, 3, 28, 0),
    (8.0, 4, 35, 1),
    (10.0, 5, 24, 1),
  ]
  # At 12:00 group 0 aggregates and clients 1-3 join group 1, fastest first.
  assert log[10:13] == [(12.0, 1, 100, 1), (12.0, 2, 50, 1), (12.0, 3, 40, 1)]
  # At 22:00 all five arrive together: one group, fixed Q per client (equilibrium).
  assert [(t, c, q) for t, c, q, _ in log[13:18]] == [
    (22.0, 1, 100),
    (22.0, 2, 50),
    (22.0, 3, 40),
    (22.0, 4, 25),
    (22.0, 5, 20),
  ]
  assert len({g for *_, g in log[13:18]}) == 1
  assert [(t, c, q) for t, c, q, _ in log[18:23]] == [
    (32.0, 1, 100),
    (32.0, 2, 50),
    (32.0, 3, 40),
    (32.0, 4, 25),
    (32.0, 5, 20),
  ]
  # Five first-arrival updates, then one update per group aggregation.
  assert sim.version == 5 + 3
  assert sim.report()['tasks']['aggregated'] == 5 + 3 + 5 + 5


@pytest.mark.parametrize('estimator, q', [('last', 50), ('ema', 48)])
def test_speed_up_client_waits_for_its_group(estimator, q):
  # Appendix G.2, Figure 20: client 3 speeds up to 5 steps/min in its second round and
  # arrives at 10:36; the server waits for clients 1 and 2 (12:00), then reassigns all three
  # to group 2 with client 3's Q from its new speed: 10 min / 0.2 min per step = 50 with the
  # newest speed; the public code's EMA weighs the newest 0.9, S = 0.9 x 0.2 + 0.1 x 0.25 =
  # 0.205 min, Q = floor(10 / 0.205) = 48 (weighing the old speed 0.9 would give 40).
  sim, _, log = _compass_sim(FIGURE_1_STEP_TIMES, {(2, 1): 28 / 5}, estimator=estimator)
  sim.run(StopCondition(max_virtual_time=12.5))
  assert (12.0, 3, q, 1) in log and not any(t == pytest.approx(10.6) for t, *_ in log)


def test_an_arrival_exactly_at_the_latest_arrival_time_is_on_time():
  # Figure 1 with client 2's second task arriving at 14:00 = T_max of group 1 (created at 02:00,
  # T_a = 12:00, lambda = 1.2): Algorithm 1 tests T_now <= T_max, so the group still takes it
  # and aggregates {1, 2, 3} at 14:00 (the group timer set for the same instant fires after).
  sim, _, log = _compass_sim(FIGURE_1_STEP_TIMES, {(1, 1): 10.0})
  sim.run(StopCondition(max_virtual_time=14.5))
  reassigned = sorted((c, g) for t, c, _, g in log if t == 14.0)
  assert reassigned == [(1, 1), (2, 1), (3, 1)]
  assert sim.version == 5 + 1  # five first arrivals, then group 1's one aggregation
  assert sim.report()['tasks']['aggregated'] == 5 + 3


@pytest.mark.parametrize('estimator, q', [('last', 28), ('ema', 29)])
def test_mild_slowdown_arrives_before_latest_arrival_time(estimator, q):
  # Figure 21: client 3 slows to 3.33 steps/min and arrives at 13:24 < T_max = 14:00: the
  # group waits for it and then reassigns clients 1-3 to the next group (T_a = 22:00). Client
  # 3's Q: 8.6 min / 0.3 = 28 with the newest speed; 8.6 / (0.9 x 0.3 + 0.1 x 0.25) = 29.
  sim, _, log = _compass_sim(FIGURE_1_STEP_TIMES, {(2, 1): 28 / (10 / 3)}, estimator=estimator)
  sim.run(StopCondition(max_virtual_time=14.5))
  reassigned = [(c, g) for t, c, _, g in log if t == pytest.approx(13.4)]
  assert reassigned == [(1, 1), (2, 1), (3, 1)]
  assert [s for t, c, s, _ in log if t == pytest.approx(13.4) and c == 3] == [q]
  assert not any(t == 12.0 for t, *_ in log)


def test_severe_slowdown_misses_latest_arrival_time():
  # Figure 22: client 3 arrives at 15:12, after T_max = 14:00. At 14:00 the timer aggregates
  # clients 1 and 2 and assigns them to group 2 (id 1); at 15:12 client 3 cannot join group 2
  # (Q < Q_min) and creates group 3 (id 2); at 22:00 group 2's members all join group 3.
  sim, scheduler, log = _compass_sim(FIGURE_1_STEP_TIMES, {(2, 1): 10.2})
  sim.run(StopCondition(max_virtual_time=22.5))
  at_14 = [(c, g) for t, c, _, g in log if t == 14.0]
  assert at_14 == [(1, 1), (2, 1)]
  at_1512 = [(c, g) for t, c, _, g in log if t == pytest.approx(15.2)]
  assert at_1512 == [(3, 2)]
  # At 22:00 group 2's members are reassigned to group 3 (T_a = 15:12 + 46 x 10.2/28 min =
  # 31:57) as far as they fit: clients 1, 2 and 4 do; client 5 would get Q = 19 < Q_min and
  # creates a group of its own, sized to merge one round later (T_exp = 31:57 + 0.1 x 100 min).
  # (The paper has all of them join, with T_a = 32:00, which needs
  # client 3 measured at 2.5 steps/min; but 28 steps at that speed end at 16:12, not 15:12,
  # so its figure's numbers are not mutually consistent.)
  at_22 = [(c, q, g) for t, c, q, g in log if t == 22.0]
  assert at_22 == [(1, 99, 2), (2, 49, 2), (4, 24, 2), (5, 39, 3)]
  # Client 3's late update waited in the general buffer and joined group 2's aggregation.
  assert sim.report()['tasks']['discarded'] == {}


def test_severe_slowdown_with_the_ema_estimator_also_creates_a_new_group():
  # Figure 22 with the public code's EMA: client 3's estimate 0.9 x 10.2/28 + 0.1 x 0.25 =
  # 0.353 min per step still gives Q = floor(6.8 / 0.353) = 19 < Q_min for group 2 at 15:12.
  sim, _, log = _compass_sim(FIGURE_1_STEP_TIMES, {(2, 1): 10.2}, estimator='ema')
  sim.run(StopCondition(max_virtual_time=16.0))
  assert [(c, g) for t, c, _, g in log if t == 14.0] == [(1, 1), (2, 1)]
  assert [(c, g) for t, c, _, g in log if t == pytest.approx(15.2)] == [(3, 2)]


@pytest.mark.parametrize('seed', range(6))
def test_equilibrium_group_count_is_bounded(seed):
  # Appendix B: with stable speeds there are at most ceil(log_Q mu) groups at equilibrium,
  # Q = Q_max / Q_min and mu = slowest / fastest time per step.
  rng = np.random.default_rng(seed)
  step_times = list(rng.uniform(0.1, 1.0, 12))
  sim, scheduler, _ = _compass_sim(step_times, q_min=20, q_max=100)
  sim.run(StopCondition(max_virtual_time=3000.0))
  mu = max(step_times) / min(step_times)
  bound = max(1, math.ceil(math.log(mu) / math.log(100 / 20)))
  open_groups = [g for g in scheduler.groups.values() if not g.aggregated]
  assert 1 <= len(open_groups) <= bound


def test_q_min_equal_q_max_is_fedasync():
  fed = toy_federation(num_clients=3, min_size=6, max_size=10)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(5,))
  update = sgd_client_update(model, optax.sgd(0.1), 4)
  # Speeds chosen so that no client ever fits exactly Q steps into another's group: every
  # arrival group then has one member and aggregates on its arrival, like FedAsync. (With
  # other speeds a fast client can join a slow client's group and the two runs differ.)
  step_times = [1.0, 1.05, 1.11]
  runs = {}
  for name in ('compass', 'fedasync'):
    if name == 'compass':
      scheduler = CompassScheduler(8, 8, 1.2, weighting='num_examples')
      join = scheduler._join_group
      scheduler._join_group = lambda sim, client: join(sim, client) and pytest.fail('joined')
      aggregator = compass_aggregator(alpha=0.9, a=0.5)
    else:
      scheduler = AsynchronousScheduler(3, 1, LocalWork(steps=8), weighting='num_examples')
      aggregator = fedasync_delta(0.9, make_staleness('polynomial', a=0.5))
    sim = Simulation(
      executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1)),
      scheduler=scheduler,
      aggregator=aggregator,
      latency=ScriptedLatency(step_times),
      init_params=model.init(jax.random.PRNGKey(0)),
      client_sizes=fed.client_sizes,
      rng=np.random.default_rng(0),
    )
    if name == 'fedasync':  # FedCompass weighs by p_i = n_i / n
      sizes = fed.client_sizes / fed.client_sizes.sum()
      apply = sim.apply_updates
      sim.apply_updates = lambda hs, ws, staleness=None: apply(
        hs, [sizes[h.client_id] for h in hs], staleness
      )
    sim.run(StopCondition(max_virtual_time=60.0))
    runs[name] = sim
  assert runs['compass'].version == runs['fedasync'].version >= 20
  for a, b in zip(
    jax.tree_util.tree_leaves(runs['compass'].params),
    jax.tree_util.tree_leaves(runs['fedasync'].params),
  ):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def _variant(name, **settings):
  """The algorithm `name`'s aggregator (its server optimizer and reducer), alpha 0.9, a 0.5."""
  optimizer, reducer = VARIANTS[name](CompassSettings.from_kwargs(settings))
  return compass_aggregator(0.9, 0.5, optimizer, reducer)


def test_fedcompass_m_applies_momentum_in_group_aggregation_only():
  """+M's first-arrival updates (group -1, applied alone) step without momentum and leave it
  untouched; `first_arrival_momentum=True` runs them through the momentum like any update."""
  from fedsim_jax.runtime import UpdateBatch

  def batch(group):
    return UpdateBatch(
      deltas={'w': jnp.array([[1.0, 0.0]])},
      weights=jnp.array([1.0]),
      staleness=jnp.array([0]),
      num_steps=jnp.array([10]),
      group=jnp.array([group], jnp.int32),
    )

  def aggregator(first_arrival_momentum):
    settings = CompassSettings.from_kwargs(
      {'server_momentum': 0.5, 'first_arrival_momentum': first_arrival_momentum}
    )
    optimizer, reducer = VARIANTS['fedcompass_m'](settings)
    return compass_aggregator(
      settings.alpha,
      settings.staleness_a,
      optimizer,
      reducer,
      optimize_first_arrivals=settings.first_arrival_momentum,
    )

  assert CompassSettings().first_arrival_momentum is False
  step = 0.9  # st(0) p Delta with alpha 0.9
  paper = aggregator(False)
  state = paper.apply(paper.init(PARAMS), batch(-1))  # first arrival: w += 0.9, m stays 0
  np.testing.assert_allclose(state.params['w'], [step, 0.0], rtol=1e-6)
  state = paper.apply(state, batch(0))  # group aggregation: m = 0.9, w += 0.9
  np.testing.assert_allclose(state.params['w'], [2 * step, 0.0], rtol=1e-6)
  state = paper.apply(state, batch(-1))  # first arrival again: m untouched
  np.testing.assert_allclose(state.params['w'], [3 * step, 0.0], rtol=1e-6)
  state = paper.apply(state, batch(0))  # m = 0.5 x 0.9 + 0.9
  np.testing.assert_allclose(state.params['w'], [3 * step + 1.5 * step, 0.0], rtol=1e-6)
  code = aggregator(True)
  state = code.apply(code.init(PARAMS), batch(-1))
  state = code.apply(state, batch(0))  # m = 0.5 x 0.9 + 0.9 already
  np.testing.assert_allclose(state.params['w'], [step + 1.5 * step, 0.0], rtol=1e-6)


def test_compass_aggregator_variants():
  from fedsim_jax.runtime import UpdateBatch

  batch = UpdateBatch(
    deltas={'w': jnp.array([[1.0, 0.0], [0.0, 2.0]])},
    weights=jnp.array([0.25, 0.75]),
    staleness=jnp.array([0, 3]),
    num_steps=jnp.array([10, 40]),
    group=jnp.zeros(2, jnp.int32),
  )
  st = np.array([0.9 * 1.0, 0.9 * 4**-0.5])
  plain = compass_aggregator().apply(compass_aggregator().init(PARAMS), batch)
  np.testing.assert_allclose(plain.params['w'], [st[0] * 0.25, st[1] * 0.75 * 2], rtol=1e-6)
  assert set(VARIANTS) == {'fedcompass', 'fedcompass_m', 'fedcompass_n'}
  named = _variant('fedcompass')
  np.testing.assert_array_equal(
    named.apply(named.init(PARAMS), batch).params['w'], plain.params['w']
  )
  nova = _variant('fedcompass_n')
  state = nova.apply(nova.init(PARAMS), batch)
  tau_eff = 0.25 * 10 + 0.75 * 40
  np.testing.assert_allclose(
    state.params['w'], [st[0] * 0.25 / 10 * tau_eff, st[1] * 0.75 * 2 / 40 * tau_eff], rtol=1e-6
  )
  momentum = _variant('fedcompass_m', server_momentum=0.5)
  state = momentum.apply(momentum.init(PARAMS), batch)
  state = momentum.apply(state, batch)
  np.testing.assert_allclose(state.params['w'], 2.5 * np.asarray(plain.params['w']), rtol=1e-6)
