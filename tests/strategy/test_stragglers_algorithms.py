"""FARe-DUST and FeAST-on-MSG (Hard et al., "Learning from straggler clients"): the history of
deltas, stale teachers, the auxiliary model and straggler windows on hand-computable cases, and
the degenerate equivalences with FedAdam / FedAvg."""

import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms, experiment
from fedsim_jax.algorithms.groups import ServerEmaSettings
from fedsim_jax.algorithms.stragglers.fare_dust import (
  EXPIRED_REASON,
  DeltaHistory,
  FareDustScheduler,
  FareDustSettings,
  fare_dust_client_update,
  stale_teacher,
)
from fedsim_jax.algorithms.stragglers.feast_msg import (
  BEYOND_TAU_MAX,
  FeastScheduler,
  FeastSettings,
  FeastState,
  auxiliary_update,
  feast_aggregator,
)
from fedsim_jax.client import (
  TeacherInputs,
  distillation_loss,
  run_local_training,
  sgd_client_update,
)
from fedsim_jax.config import ConfigError, base_config
from fedsim_jax.data import client_batch, toy_federation
from fedsim_jax.executor import ClientTask, Executor
from fedsim_jax.executor.executor import TaskBatchResult
from fedsim_jax.experiment import run_experiment
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.strategy import (
  LocalWork,
  SynchronousScheduler,
  server_optimizer,
  server_update,
  with_ema,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FED = toy_federation(num_clients=12, min_size=4, max_size=12)

# ---- A scripted federation: one-hot deltas, fixed per-task latencies -----------------------
#
# Task i (dispatch order) returns delta e_i, so any sum of deltas shows which tasks it holds.
# B = 2 of B_t = 3 per round; the two fast tasks take 1 s and 2 s, so round r runs from 2r to
# 2r + 2; the third is a straggler with the duration below (arrival = 2r + duration).
#   round:      0    1    2    3    4    5     6    7
#   straggler:  1    3    7    11   12   17    19   23      (task id)
#   arrives at: 2.5  7.5  9.0  12.5 11.5 40.5  14.5 23.5
SCRIPT = [
  [1.0, 2.5, 2.0],
  [5.5, 1.0, 2.0],
  [2.0, 5.0, 1.0],
  [1.0, 2.0, 6.5],
  [3.5, 1.0, 2.0],
  [2.0, 1.0, 30.5],
  [1.0, 2.5, 2.0],
  [2.0, 1.0, 9.5],
  [1.0, 2.0, 3.0],
]
FAST = {
  0: {0, 2},
  1: {4, 5},
  2: {6, 8},
  3: {9, 10},
  4: {13, 14},
  5: {15, 16},
  6: {18, 20},
  7: {21, 22},
}
NUM_TASKS = 3 * len(SCRIPT)
ROUNDS = 8  # the run stops at version 8 (time 16); round 8 has been dispatched by then


class ScriptedLatency:
  """Task i (in dispatch order) lasts durations[i] seconds, whatever its client and steps."""

  def __init__(self, durations):
    self.durations = list(durations)
    self.sampled = 0

  def sample(self, client_id):
    del client_id
    duration = self.durations[self.sampled]
    self.sampled += 1
    return TaskLatency(communication=duration, overhead=0.0, per_step=0.0)

  def expected_step_time(self, client_id):
    del client_id
    return 0.0


class OneHotExecutor:
  """Returns delta e_{task id} for every task (no training) and records each task's inputs."""

  def __init__(self):
    self.task_inputs = {}

  def run(self, tasks):
    deltas = np.zeros((len(tasks), NUM_TASKS), np.float32)
    for row, task in enumerate(tasks):
      deltas[row, task.seed] = 1.0  # the runtime seeds a task with its id
      self.task_inputs[task.seed] = task.task_inputs
    aux = {'train_loss': jnp.zeros(len(tasks)), 'steps_run': jnp.ones(len(tasks), jnp.int32)}
    return TaskBatchResult(deltas={'w': jnp.asarray(deltas)}, aux=aux, num_tasks=len(tasks))


def _one_hot(tasks, scale=1.0):
  v = np.zeros(NUM_TASKS, np.float32)
  v[sorted(tasks)] = scale
  return v


def _scripted_simulation(scheduler, aggregator, init=None):
  versions = []
  sim = Simulation(
    executor=OneHotExecutor(),
    scheduler=scheduler,
    aggregator=aggregator,
    latency=ScriptedLatency(sum(SCRIPT, [])),
    init_params={'w': jnp.zeros(NUM_TASKS) if init is None else init},
    client_sizes=np.full(12, 8),
    rng=np.random.default_rng(0),
    on_version=lambda s: versions.append(np.asarray(s.params['w'])),
  )
  versions.append(np.asarray(sim.params['w']))
  return sim, versions


# ---- Real training on a toy federation -----------------------------------------------------


def _model():
  return get_model('mlp', FED.input_shape, FED.num_classes, hidden_sizes=(6,))


def _simulation(scheduler, aggregator, update=None, latency=None, seed=0, deferred=True):
  model = _model()
  update = update or sgd_client_update(model, optax.sgd(0.2), 4)
  return Simulation(
    executor=Executor(update, FED.device_arrays(), jax.random.PRNGKey(1)),
    scheduler=scheduler,
    aggregator=aggregator,
    latency=latency
    or PerStepLatency(
      FED.num_clients, np.random.default_rng(5), mean=1.0, distribution='exponential'
    ),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=FED.client_sizes,
    rng=np.random.default_rng(seed),
    deferred=deferred,
  )


def _assert_trees_equal(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _assert_trees_close(a, b, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def _fare_dust_scheduler(k=2, teacher_learning_rate=0.5, distill=True, **kwargs):
  return FareDustScheduler(
    2,
    LocalWork(steps=1),
    'uniform',
    num_selected=3,
    history_length=k,
    teacher_learning_rate=teacher_learning_rate,
    distill=distill,
    rng=np.random.default_rng(7),
    **kwargs,
  )


# ---- FARe-DUST ------------------------------------------------------------------------------


class TestDeltaHistory:
  def test_late_updates_land_in_their_round_and_old_rounds_expire(self):
    history = DeltaHistory(2)
    assert history.push(0, {'w': jnp.array([1.0, 0.0])}, 1.0, 1) is None
    assert history.push(1, {'w': jnp.array([0.0, 2.0])}, 2.0, 2) is None
    assert history.add(0, {'w': jnp.array([3.0, 0.0])}, 1.0)  # a straggler of round 0
    slot = history.slot(0)
    np.testing.assert_allclose(slot.delta_sum['w'], [4.0, 0.0])
    assert (slot.weight_sum, slot.count) == (2.0, 2)
    evicted = history.push(2, {'w': jnp.array([0.0, 0.0])}, 2.0, 2)  # |Deltas| > k: drop 0
    assert evicted.round_index == 0 and evicted.count == 2
    assert history.rounds == [1, 2] and len(history) == 2
    assert not history.add(0, {'w': jnp.array([1.0, 1.0])}, 1.0)  # expired
    assert not history.add(7, {'w': jnp.array([1.0, 1.0])}, 1.0)  # never held
    assert history.slot(1).count == 2

  def test_rounds_enter_in_order(self):
    history = DeltaHistory(3)
    history.push(4, {'w': jnp.zeros(1)}, 1.0, 1)
    with pytest.raises(ValueError, match='round 4'):
      history.push(4, {'w': jnp.zeros(1)}, 1.0, 1)
    with pytest.raises(ValueError, match='history_length'):
      DeltaHistory(0)

  def test_teachers_are_drawn_uniformly(self):
    history = DeltaHistory(3)
    assert history.sample(np.random.default_rng(0)) is None
    for r in range(3):
      history.push(r, {'w': jnp.zeros(1)}, 1.0, 1)
    rng = np.random.default_rng(0)
    draws = np.array([history.sample(rng).round_index for _ in range(3000)])
    np.testing.assert_allclose(np.bincount(draws) / 3000, [1 / 3] * 3, atol=0.03)

  def test_teacher_is_latest_weights_plus_mean_historical_delta(self):
    # Algorithm 1 line 7: w_t - (eta / b) Delta in the paper's sign = w_t + eta * sum / b here.
    teacher = stale_teacher(
      {'w': jnp.array([1.0, 2.0])},
      {'w': jnp.array([4.0, -2.0])},
      jnp.float32(2.0),
      jnp.float32(0.5),
    )
    np.testing.assert_allclose(teacher['w'], [1.0 + 0.5 * 2.0, 2.0 + 0.5 * -1.0])


class TestFareDustSchedule:
  def _run(self, **kwargs):
    scheduler = _fare_dust_scheduler(**kwargs)
    evicted = []
    push = scheduler.history.push

    def recording_push(*args):
      slot = push(*args)
      if slot is not None:
        evicted.append(slot)
      return slot

    scheduler.history.push = recording_push
    sim, versions = _scripted_simulation(scheduler, server_update(optax.sgd(1.0)))
    sim.run(StopCondition(max_versions=ROUNDS))
    return sim, scheduler, versions, evicted

  def test_over_selection_aggregates_exactly_the_first_b_arrivals(self):
    sim, _, versions, _ = self._run()
    assert sim.now == 2.0 * ROUNDS
    for r in range(ROUNDS):  # SGD(1) on uniform weights: w_{r+1} - w_r = mean of the fast e_i
      np.testing.assert_allclose(versions[r + 1] - versions[r], _one_hot(FAST[r], 0.5))

  def test_history_slots_hold_fast_and_folded_updates_and_expire(self):
    sim, scheduler, _, evicted = self._run()
    # Straggler of round r is kept while round r is among the k = 2 latest rounds, i.e. until
    # round r + 2 closes at 2r + 6: tasks 1, 3, 7, 12, 19 fold in; task 11 (12.5 > 12) is late.
    expected = {
      0: {0, 1, 2},
      1: {3, 4, 5},
      2: {6, 7, 8},
      3: {9, 10},
      4: {12, 13, 14},
      5: {15, 16},
      6: {18, 19, 20},
      7: {21, 22},
    }
    assert [slot.round_index for slot in evicted] == [0, 1, 2, 3, 4, 5]
    assert scheduler.history.rounds == [6, 7]
    for slot in evicted + [scheduler.history.slot(6), scheduler.history.slot(7)]:
      tasks = expected[slot.round_index]
      np.testing.assert_allclose(slot.delta_sum['w'], _one_hot(tasks))
      assert slot.count == len(tasks) and slot.weight_sum == len(tasks)
    report = sim.report()['tasks']
    assert report['discarded'] == {EXPIRED_REASON: 1}
    assert report['aggregated'] == 2 * ROUNDS + 5 and scheduler.folded == 5
    assert scheduler.report()['late_updates_folded'] == 5

  def test_a_longer_history_keeps_every_straggler(self):
    sim, scheduler, _, evicted = self._run(k=50)
    assert not evicted and scheduler.history.rounds == list(range(ROUNDS))
    np.testing.assert_allclose(scheduler.history.slot(3).delta_sum['w'], _one_hot({9, 10, 11}))
    assert sim.report()['tasks']['discarded'] == {}

  def test_each_client_gets_latest_weights_plus_one_slot_mean(self):
    sim, _, versions, _ = self._run()
    inputs = sim.executor.task_inputs
    # Slot contents when round r dispatches (time 2r): stragglers count once they arrived.
    # (Round 8's tasks were dispatched at the end and never computed.)
    available = {
      1: [{0, 2}],
      2: [{0, 1, 2}, {4, 5}],
      3: [{4, 5}, {6, 8}],
      4: [{6, 8}, {9, 10}],
      5: [{9, 10}, {13, 14}],
      6: [{12, 13, 14}, {15, 16}],
      7: [{15, 16}, {18, 20}],
    }
    for task in range(3):  # round 0: nothing to draw, no distillation
      assert float(inputs[task].weight) == 0.0
      np.testing.assert_array_equal(inputs[task].params['w'], versions[0])
    drawn = set()
    for r, choices in available.items():
      for task in range(3 * r, 3 * r + 3):
        teacher = inputs[task]
        assert float(teacher.weight) == 1.0
        step = np.asarray(teacher.params['w']) - versions[r]
        tasks = set(np.flatnonzero(step).tolist())
        assert tasks in choices, (r, task, tasks)
        # teacher = w_r + eta_teacher * (sum of the slot's deltas) / count
        np.testing.assert_allclose(step, _one_hot(tasks, 0.5 / len(tasks)), atol=1e-7)
        drawn.add((r, choices.index(tasks)))
    assert len(drawn) > len(available)  # both slots get drawn in some rounds

  def test_latest_model_teacher_before_any_history(self):
    sim, _, versions, _ = self._run(empty_history='latest_model')
    teacher = sim.executor.task_inputs[0]
    assert float(teacher.weight) == 1.0
    np.testing.assert_array_equal(teacher.params['w'], versions[0])

  def test_no_teachers_without_distillation(self):
    sim, _, _, _ = self._run(distill=False)
    assert all(inputs is None for inputs in sim.executor.task_inputs.values())


class TestStaleTeacherClient:
  """Algorithm 3: local SGD on F_i + rho psi(w, w_teacher), the teacher from task inputs."""

  def _train(self, update, teacher=None, client=3, seed=11, steps=2):
    model = _model()
    params = model.init(jax.random.PRNGKey(0))
    key = jax.random.fold_in(jax.random.PRNGKey(1), seed)
    delta, _ = run_local_training(
      update,
      FED.device_arrays(),
      params,
      jnp.int32(client),
      jnp.int32(steps),
      key,
      teacher,
      max_steps=steps,
    )
    return params, delta

  def _teacher(self, weight=1.0):
    return TeacherInputs(params=_model().init(jax.random.PRNGKey(42)), weight=np.float32(weight))

  def test_zero_weight_task_trains_on_the_task_loss_alone(self):
    model = _model()
    plain = sgd_client_update(model, optax.sgd(0.2), 4)
    distil = fare_dust_client_update(model, optax.sgd(0.2), 4, distillation_strength=0.5)
    _, expected = self._train(plain)
    _, delta = self._train(distil, self._teacher(0.0))
    _assert_trees_close(delta, expected, atol=1e-7)

  def test_teacher_equal_to_download_matches_downloaded_teacher(self):
    model = _model()
    params = model.init(jax.random.PRNGKey(0))
    downloaded = sgd_client_update(
      model, optax.sgd(0.2), 4, distillation_strength=0.5, distillation_temperature=2.0
    )
    own = fare_dust_client_update(
      model, optax.sgd(0.2), 4, distillation_strength=0.5, distillation_temperature=2.0
    )
    _, expected = self._train(downloaded)
    _, delta = self._train(own, TeacherInputs(params=params, weight=np.float32(1.0)))
    _assert_trees_close(delta, expected, atol=1e-7)

  def test_one_step_is_sgd_on_task_loss_plus_rho_distillation(self):
    model = _model()
    rho, temperature, lr = 0.7, 2.0, 0.3
    update = fare_dust_client_update(
      model, optax.sgd(lr), 4, distillation_strength=rho, distillation_temperature=temperature
    )
    teacher = self._teacher()
    params, delta = self._train(update, teacher, steps=1)
    key = jax.random.fold_in(jax.random.PRNGKey(1), 11)
    x, y, w = client_batch(FED.device_arrays(), jnp.int32(3), jnp.int32(0), key, 4)

    def objective(p):
      logits = model.apply(p, x)
      return model.cross_entropy(logits, y, w) + rho * distillation_loss(
        logits, model.apply(teacher.params, x), w, temperature
      )

    grads = jax.grad(objective)(params)
    _assert_trees_close(delta, jax.tree_util.tree_map(lambda g: -lr * g, grads), atol=1e-6)
    _, plain = self._train(sgd_client_update(model, optax.sgd(lr), 4), steps=1)
    assert not np.allclose(jax.tree_util.tree_leaves(delta)[0], jax.tree_util.tree_leaves(plain)[0])

  @pytest.mark.parametrize('backend', ['vmap', 'loop'])
  def test_each_task_of_a_batch_distils_from_its_own_teacher(self, backend):
    model = _model()
    params = model.init(jax.random.PRNGKey(0))
    update = fare_dust_client_update(model, optax.sgd(0.2), 4, distillation_strength=1.0)
    executor = Executor(update, FED.device_arrays(), jax.random.PRNGKey(1), backend=backend)
    teachers = [
      TeacherInputs(model.init(jax.random.PRNGKey(s)), np.float32(1.0)) for s in (5, 6, 7)
    ]
    tasks = [ClientTask(2, 3, 9, params, teacher) for teacher in teachers]
    batch = executor.run(tasks)
    for row, task in enumerate(tasks):
      alone = executor.run([task]).deltas
      _assert_trees_close(
        jax.tree_util.tree_map(lambda d: d[row], batch.deltas),
        jax.tree_util.tree_map(lambda d: d[0], alone),
        atol=1e-6,
      )
    first, second = (np.asarray(jax.tree_util.tree_leaves(batch.deltas)[0][i]) for i in (0, 1))
    assert not np.allclose(first, second)


class TestFareDustEquivalences:
  def test_distillation_changes_training_only_once_history_exists(self):
    def run(rho):
      model = _model()
      update = fare_dust_client_update(model, optax.sgd(0.2), 4, distillation_strength=rho)
      scheduler = FareDustScheduler(
        3,
        LocalWork(steps=3),
        'uniform',
        num_selected=5,
        history_length=3,
        teacher_learning_rate=1.0,
        distill=rho > 0,
        rng=np.random.default_rng(3),
      )
      sim = _simulation(scheduler, server_update(optax.sgd(1.0)), update=update)
      params = []
      sim.on_version = lambda s: params.append(s.params)
      sim.run(StopCondition(max_versions=3))
      return params

    plain, distilled = run(0.0), run(0.5)
    _assert_trees_close(plain[0], distilled[0], atol=1e-7)  # round 0: no teacher to distil from
    gap = max(
      float(np.abs(np.asarray(a) - np.asarray(b)).max())
      for a, b in zip(jax.tree_util.tree_leaves(plain[1]), jax.tree_util.tree_leaves(distilled[1]))
    )
    assert gap > 1e-4

  def test_rho_zero_without_ema_is_fedadam_with_over_selection(self, tmp_path):
    fed = toy_federation(
      num_clients=10, num_classes=10, image_shape=(28, 28, 1), min_size=4, max_size=16
    )

    def run(path, tmp, **overrides):
      spec = importlib.util.spec_from_file_location('config_module', os.path.join(ROOT, path))
      module = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(module)
      config = module.get_config()
      config.data.num_clients = 10
      config.algorithm.kwargs.update(cohort_size=3, num_selected=5, **overrides)
      config.client.batch_size = 4
      config.model.kwargs.hidden_sizes = (8,)
      config.run.num_rounds = 6
      config.run.eval_every = 1
      summary = run_experiment(config, tmp, dataset=fed)
      with open(os.path.join(tmp, 'metrics.jsonl')) as f:
        rows = [json.loads(line) for line in f]
      # The trajectory (the participation statistics differ: see below).
      trajectory = ('virtual_time', 'version', 'client_updates', 'gradient_steps')
      return summary, [
        {k: v for k, v in row.items() if k in trajectory or k.startswith('test_')} for row in rows
      ]

    fare, fare_rows = run(
      'configs/fare_dust_fashion_mnist.py',
      tmp_path / 'a',
      rho=0.0,
      ema_decay=0.0,
    )
    adam, adam_rows = run('configs/fedadam_overselection_fashion_mnist.py', tmp_path / 'b')
    assert fare_rows == adam_rows
    # Same trajectory, but FARe-DUST folded the stragglers FedAdam dropped.
    assert fare['scheduler']['late_updates_folded'] > 0
    assert adam['tasks']['discarded']['straggler'] >= fare['scheduler']['late_updates_folded']


# ---- FeAST-on-MSG ---------------------------------------------------------------------------


class TestAuxiliaryUpdate:
  def _state(self, a):
    return FeastState(inner=None, auxiliary={'w': jnp.array(a, jnp.float32)})

  def test_one_step_by_hand(self):
    # mean = 4 / 2 = 2; w+ = 2 + 0.5 * 2 = 3; a = 0.8 (1 + 0.25 * 2) + 0.2 * 3 = 1.8
    update = auxiliary_update(server_learning_rate=0.5, kappa=0.5, decay=0.8)
    state = update(
      self._state([1.0]), {'w': jnp.array([2.0])}, {'w': jnp.array([4.0])}, jnp.float32(2.0)
    )
    np.testing.assert_allclose(state.eval_params['w'], [1.8], rtol=1e-6)

  def test_kappa_zero_is_an_ema_of_the_plus_models(self):
    update = auxiliary_update(server_learning_rate=0.5, kappa=0.0, decay=0.9)
    state, ema = self._state([0.0, 1.0]), np.array([0.0, 1.0])
    rng = np.random.default_rng(0)
    for _ in range(5):
      w, d, b = rng.normal(size=2), rng.normal(size=2), float(rng.integers(1, 5))
      state = update(
        state,
        {'w': jnp.asarray(w, jnp.float32)},
        {'w': jnp.asarray(d, jnp.float32)},
        jnp.float32(b),
      )
      ema = 0.9 * ema + 0.1 * (w + 0.5 * d / b)
    np.testing.assert_allclose(state.eval_params['w'], ema, rtol=1e-5)

  def test_kappa_one_is_a_step_on_the_blend_of_auxiliary_and_global(self):
    # eta_a = eta_g: a' = (beta a + (1 - beta) w_t) + eta_g mean (Sec. 2.3).
    update = auxiliary_update(server_learning_rate=0.3, kappa=1.0, decay=0.6)
    state = update(
      self._state([1.0]), {'w': jnp.array([3.0])}, {'w': jnp.array([6.0])}, jnp.float32(3.0)
    )
    np.testing.assert_allclose(state.eval_params['w'], [0.6 * 1 + 0.4 * 3 + 0.3 * 2], rtol=1e-6)

  @pytest.mark.parametrize(
    'kwargs,match',
    [
      (
        dict(server_learning_rate=0.0, kappa=0.1, decay=0.5),
        'algorithm.kwargs.server_learning_rate',
      ),
      (dict(server_learning_rate=1.0, kappa=-0.1, decay=0.5), 'algorithm.kwargs.kappa'),
      (dict(server_learning_rate=1.0, kappa=0.1, decay=1.0), 'algorithm.kwargs.ema_decay'),
    ],
  )
  def test_invalid_settings(self, kwargs, match):
    with pytest.raises(ValueError, match=match):
      auxiliary_update(**kwargs)


class TestFeastSchedule:
  LR, KAPPA, BETA, TAU = 0.5, 0.6, 0.7, 5.0

  def _run(self, tau_max=TAU, window_close='complete'):
    scheduler = FeastScheduler(
      2,
      LocalWork(steps=1),
      'uniform',
      num_selected=3,
      tau_max=tau_max,
      update_auxiliary=auxiliary_update(self.LR, self.KAPPA, self.BETA),
      window_close=window_close,
    )
    sim, versions = _scripted_simulation(scheduler, feast_aggregator(self.LR))
    sim.run(StopCondition(max_versions=ROUNDS))
    return sim, scheduler, versions

  def _expected_auxiliary(self, versions, windows):
    a = versions[0].copy()
    for r, tasks in enumerate(windows):
      mean = _one_hot(tasks, 1.0 / len(tasks))
      w_plus = versions[r] + self.LR * mean
      a = self.BETA * (a + self.KAPPA * self.LR * mean) + (1 - self.BETA) * w_plus
    return a

  def test_global_model_advances_on_the_first_b_arrivals(self):
    _, _, versions = self._run()
    for r in range(ROUNDS):
      np.testing.assert_allclose(versions[r + 1] - versions[r], _one_hot(FAST[r], self.LR / 2))

  def test_stragglers_within_tau_max_update_the_auxiliary_model_in_round_order(self):
    sim, scheduler, versions = self._run()
    # tau_max = 5 s from each round's start: stragglers 1 (2.5 s), 7 (exactly 5 s), 12 and 19
    # join; 3 (5.5 s) and 11 (6.5 s) are too late; 17 and 23 have not reported. Windows 0-6
    # have closed (window 5 by its timer at 15 s); window 7's timer is at 19 s.
    windows = [{0, 1, 2}, {4, 5}, {6, 7, 8}, {9, 10}, {12, 13, 14}, {15, 16}, {18, 19, 20}]
    assert scheduler.window_sizes == [len(w) for w in windows]
    assert scheduler.report()['pending_windows'] == 1
    report = sim.report()['tasks']
    assert report['discarded'] == {BEYOND_TAU_MAX: 2}
    assert report['aggregated'] == 2 * ROUNDS + 4 and scheduler.folded == 4
    np.testing.assert_allclose(
      np.asarray(sim.eval_params['w']), self._expected_auxiliary(versions, windows), atol=1e-6
    )
    np.testing.assert_array_equal(np.asarray(sim.params['w']), versions[-1])

  def test_windows_closing_only_at_tau_max_give_the_same_rounds_later(self):
    # Window r closes at 2r + 5 s: windows 0-5 by 15 s; window 6 (complete at 14.5 s) is not
    # applied before its limit at 17 s.
    sim, scheduler, versions = self._run(window_close='tau_max')
    windows = [{0, 1, 2}, {4, 5}, {6, 7, 8}, {9, 10}, {12, 13, 14}, {15, 16}]
    assert scheduler.window_sizes == [len(w) for w in windows]
    assert scheduler.report()['pending_windows'] == 2
    assert sim.report()['tasks']['discarded'] == {BEYOND_TAU_MAX: 2}
    np.testing.assert_allclose(
      np.asarray(sim.eval_params['w']), self._expected_auxiliary(versions, windows), atol=1e-6
    )

  def test_zero_tau_max_uses_the_fast_clients_only(self):
    sim, scheduler, versions = self._run(tau_max=0.0)
    assert scheduler.window_sizes == [2] * ROUNDS
    assert sim.report()['tasks']['discarded'] == {BEYOND_TAU_MAX: 6}
    np.testing.assert_allclose(
      np.asarray(sim.eval_params['w']),
      self._expected_auxiliary(versions, [FAST[r] for r in range(ROUNDS)]),
      atol=1e-6,
    )

  def test_a_window_waits_for_earlier_rounds(self):
    # With tau_max = 30 s every straggler that reports by 16 s joins. Window 5 (straggler due
    # at 40.5 s) stays open until its timer at 40 s, so window 6, complete at 14.5 s, must not
    # update a before it; window 4 (complete at 11.5 s) waited for window 3 (12.5 s).
    sim, scheduler, versions = self._run(tau_max=30.0)
    assert scheduler.window_sizes == [3, 3, 3, 3, 3]
    assert scheduler.report()['pending_windows'] == 3  # rounds 5, 6 (closed) and 7
    assert sim.report()['tasks']['discarded'] == {}
    np.testing.assert_allclose(
      np.asarray(sim.eval_params['w']),
      self._expected_auxiliary(
        versions, [{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}, {12, 13, 14}]
      ),
      atol=1e-6,
    )


class TestFeastEquivalences:
  def test_without_stragglers_and_beta_zero_the_auxiliary_model_is_fedavg(self):
    local_work = LocalWork(steps=3, batch_size=4)
    feast = _simulation(
      FeastScheduler(
        3,
        local_work,
        'uniform',
        num_selected=3,
        tau_max=1e5,
        update_auxiliary=auxiliary_update(0.7, 0.9, 0.0),
      ),
      feast_aggregator(0.7),
    )
    fedavg = _simulation(
      SynchronousScheduler(3, local_work, 'uniform'), server_update(optax.sgd(0.7))
    )
    seen = []
    feast.on_version = lambda s: seen.append((s.params, s.eval_params))
    feast.run(StopCondition(max_versions=4))
    fedavg.run(StopCondition(max_versions=4))
    _assert_trees_equal(feast.params, fedavg.params)
    # No stragglers: Delta^+ = Delta, w^+_{t+1} = w_{t+1}, and with beta = 0, a_{t+1} = w_{t+1}
    # at every version (the window closes as the round does).
    assert len(seen) == 4 and feast.scheduler.auxiliary_updates == 4
    for params, evaluated in seen:
      _assert_trees_close(evaluated, params, atol=1e-6)

  def test_without_stragglers_and_kappa_zero_the_auxiliary_model_is_an_ema_of_fedavg(self):
    local_work = LocalWork(steps=3, batch_size=4)
    feast = _simulation(
      FeastScheduler(
        3,
        local_work,
        'uniform',
        num_selected=3,
        tau_max=1e5,
        update_auxiliary=auxiliary_update(0.7, 0.0, 0.5),
      ),
      feast_aggregator(0.7),
    )
    ema = _simulation(
      SynchronousScheduler(3, local_work, 'uniform'), with_ema(server_update(optax.sgd(0.7)), 0.5)
    )
    feast.run(StopCondition(max_versions=4))
    ema.run(StopCondition(max_versions=4))
    _assert_trees_equal(feast.params, ema.params)
    _assert_trees_close(feast.eval_params, ema.eval_params, atol=1e-6)

  def test_over_selected_run_folds_stragglers_and_keeps_the_global_model(self):
    # The global model is FedAvg with over-selection whatever tau_max, kappa and beta are.
    local_work = LocalWork(steps=3, batch_size=4)
    feast = _simulation(
      FeastScheduler(
        3,
        local_work,
        'uniform',
        num_selected=5,
        tau_max=1e5,
        update_auxiliary=auxiliary_update(0.7, 0.5, 0.9),
      ),
      feast_aggregator(0.7),
    )
    fedavg = _simulation(
      SynchronousScheduler(3, local_work, 'uniform', num_selected=5), server_update(optax.sgd(0.7))
    )
    feast.run(StopCondition(max_versions=6))
    fedavg.run(StopCondition(max_versions=6))
    _assert_trees_equal(feast.params, fedavg.params)
    assert feast.scheduler.folded > 0
    assert not np.allclose(
      jax.tree_util.tree_leaves(feast.eval_params)[0], jax.tree_util.tree_leaves(feast.params)[0]
    )
    feast.report()


@pytest.mark.parametrize('algorithm', ['fare_dust', 'feast_msg'])
def test_deferred_equals_eager(algorithm):
  runs = {}
  for deferred in (True, False):
    if algorithm == 'fare_dust':
      update = fare_dust_client_update(_model(), optax.sgd(0.2), 4, distillation_strength=0.5)
      scheduler = FareDustScheduler(
        3,
        LocalWork(steps=3),
        'uniform',
        num_selected=5,
        history_length=2,
        teacher_learning_rate=1.0,
        distill=True,
        rng=np.random.default_rng(3),
      )
      aggregator = server_update(optax.sgd(1.0))
    else:
      update = None
      scheduler = FeastScheduler(
        3,
        LocalWork(steps=3),
        'uniform',
        num_selected=5,
        tau_max=3.0,
        update_auxiliary=auxiliary_update(1.0, 0.5, 0.5),
      )
      aggregator = feast_aggregator(1.0)
    sim = _simulation(scheduler, aggregator, update=update, deferred=deferred)
    sim.run(StopCondition(max_versions=5))
    runs[deferred] = sim
  assert runs[True].now == runs[False].now
  assert runs[True].report()['tasks'] == runs[False].report()['tasks']
  assert runs[True].executor_batches < runs[False].executor_batches
  _assert_trees_close(runs[True].params, runs[False].params, atol=1e-5)
  _assert_trees_close(runs[True].eval_params, runs[False].eval_params, atol=1e-5)


# ---- Configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
  'algorithm,field,value,match',
  [
    ('fare_dust', 'history_length', 0, 'algorithm.kwargs.history_length'),
    ('fare_dust', 'rho', -0.1, 'algorithm.kwargs.rho'),
    ('fare_dust', 'temperature', 0.0, 'algorithm.kwargs.temperature'),
    ('fare_dust', 'ema_decay', 1.0, 'algorithm.kwargs.ema_decay'),
    ('fare_dust', 'teacher_learning_rate', -1.0, 'algorithm.kwargs.teacher_learning_rate'),
    ('fare_dust', 'empty_history', 'zeros', 'algorithm.kwargs.empty_history'),
    ('fare_dust', 'server_optimizer', 'lamb', 'algorithm.kwargs.server_optimizer'),
    # FARe-DUST distils with rho from its stale teachers, not from the downloaded model.
    (
      'fare_dust',
      'distillation_strength',
      0.1,
      'algorithm.kwargs.distillation_strength is not a setting of FareDustSettings',
    ),
    (
      'feast_msg',
      'deadline',
      10.0,
      'algorithm.kwargs.deadline is not a setting of FeastSettings',
    ),
    ('feast_msg', 'tau_max', -1.0, 'algorithm.kwargs.tau_max'),
    ('feast_msg', 'ema_decay', 1.5, 'algorithm.kwargs.ema_decay'),
    ('feast_msg', 'kappa', -0.5, 'algorithm.kwargs.kappa'),
    ('feast_msg', 'tau_max', float('inf'), 'algorithm.kwargs.tau_max'),
    ('feast_msg', 'window_close', 'never', 'algorithm.kwargs.window_close'),
  ],
)
def test_invalid_settings_name_the_setting(algorithm, field, value, match):
  config = base_config()
  config.algorithm.name = algorithm
  config.algorithm.kwargs[field] = value
  with pytest.raises(ConfigError, match=match) as error:
    experiment.validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


@pytest.mark.parametrize('settings', [FareDustSettings, FeastSettings])
def test_the_evaluated_ema_is_the_algorithms_own(settings):
  # FARe-DUST's beta (Tables 16-17) and FeAST-on-MSG's auxiliary-model beta (Eq. 2) are their
  # `ema_decay`; no generic server EMA can be stacked on top of them.
  assert not issubclass(settings, ServerEmaSettings)
  assert settings.field_names().count('ema_decay') == 1
  assert settings.from_kwargs({'ema_decay': 0.9}).ema_decay == 0.9


def test_paper_defaults():
  # Tables 16-17 (EMNIST), App. G.3; Table 18 (EMNIST per-example), App. G.4.
  fare = algorithms.get_spec('fare_dust').settings()
  assert (fare.history_length, fare.rho, fare.ema_decay) == (50, 0.1, 0.99)
  assert fare.server_optimizer == 'adam'
  feast = algorithms.get_spec('feast_msg').settings()
  assert (feast.tau_max, feast.ema_decay, feast.kappa) == (1e5, 0.95, 0.0)
  config = base_config()
  for algorithm in ('fare_dust', 'feast_msg'):
    config.algorithm.name = algorithm
    assert experiment.validate(config) == algorithms.get_spec(algorithm).settings()


def test_server_optimizer_of_fare_dust_is_fedadam():
  # FARe-DUST's global update is FedAdam's (G.3), built from the server optimizer settings.
  config = base_config()
  config.algorithm.name = 'fare_dust'
  config.algorithm.kwargs.update(ema_decay=0.0, server_learning_rate=0.01, eps=1e-3)
  context = algorithms.BuildContext(
    'fare_dust', experiment.run_facts(config), FED.client_sizes, None
  )
  algorithm = algorithms.build(experiment.validate(config), context)
  reference = server_update(server_optimizer('adam', 0.01, b1=0.9, b2=0.99, eps=1e-3))
  params = {'w': jnp.array([1.0, -1.0])}
  batch_deltas = {'w': jnp.array([[0.5, 0.2], [0.1, -0.3]])}
  batch = UpdateBatch(
    deltas=batch_deltas,
    weights=jnp.ones(2),
    staleness=jnp.zeros(2, jnp.int32),
    num_steps=jnp.ones(2, jnp.int32),
    group=jnp.zeros(2, jnp.int32),
  )
  got = algorithm.aggregator.apply(algorithm.aggregator.init(params), batch)
  want = reference.apply(reference.init(params), batch)
  _assert_trees_equal(got.params, want.params)
