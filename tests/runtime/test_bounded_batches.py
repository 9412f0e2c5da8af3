"""`max_batch_tasks`: executor batches and held updates stay bounded whatever the cohort or the
concurrency, and rounds larger than the bound are summed chunk by chunk through the
aggregator's linear form, to the same model as the unbounded run up to rounding."""

import jax
import numpy as np
import optax
import pytest

from fedsim_jax.client import sgd_client_update
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import Executor
from fedsim_jax.executor.choice import resolve_max_batch_tasks
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  count_mean,
  fednova_mean,
  server_update,
  staleness_scaled,
  weighted_mean,
  weighted_sum,
)
from fedsim_jax.strategy.ema import with_ema
from fedsim_jax.strategy.reducers import LinearReducer
from fedsim_jax.strategy.staleness import polynomial


class RecordingExecutor:
  """An executor that records each batch's size and the updates the simulation holds then.

  It stacks every batch's results (`run`), as the vmap backend does, even over the loop
  backend, which would otherwise sum a round's pending tasks as they train, holding none
  (tests/runtime/test_summed_aggregation.py)."""

  sums_tasks = False

  def __init__(self, executor):
    self.executor = executor
    self.sizes = []
    self.held = []
    self.simulation = None

  def run(self, tasks):
    self.sizes.append(len(tasks))
    self.held.append(len(self.simulation.tasks.held_results))
    return self.executor.run(tasks)

  def __getattr__(self, name):
    return getattr(self.executor, name)


def _simulation(scheduler, aggregator, max_batch_tasks, num_clients=64):
  fed = toy_federation(num_clients=num_clients, min_size=8, max_size=16, seed=3)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  update = sgd_client_update(model, optax.sgd(0.2), 4)
  executor = RecordingExecutor(
    Executor(update, fed.device_arrays(), jax.random.PRNGKey(11), backend='loop', threads=1)
  )
  sim = Simulation(
    executor=executor,
    scheduler=scheduler,
    aggregator=aggregator,
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(1), mean=1.0, jitter=0.05),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(2),
    max_batch_tasks=max_batch_tasks,
  )
  executor.simulation = sim
  return sim


def _assert_close(a, b, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=atol)


def _sync(aggregator, max_batch_tasks):
  scheduler = SynchronousScheduler(48, LocalWork(steps=3, batch_size=4))
  sim = _simulation(scheduler, aggregator, max_batch_tasks)
  sim.run(StopCondition(max_versions=3))
  return sim


@pytest.mark.parametrize(
  'make_aggregator',
  [
    lambda: server_update(optax.sgd(1.0)),  # FedAvg
    lambda: server_update(optax.adam(0.01)),  # FedAdam
    lambda: with_ema(server_update(optax.sgd(1.0), fednova_mean()), 0.9),
  ],
  ids=['fedavg', 'fedadam', 'fednova_ema'],
)
def test_a_round_larger_than_the_bound_is_summed_in_chunks_to_the_same_model(make_aggregator):
  unbounded = _sync(make_aggregator(), None)
  bounded = _sync(make_aggregator(), 8)
  assert unbounded.executor.sizes == [48, 48, 48]  # one batch per round
  assert set(bounded.executor.sizes) == {8} and len(bounded.executor.sizes) == 18
  assert max(bounded.executor.held) == 0  # each chunk freed before the next is computed
  assert bounded.accounting.as_dict() == unbounded.accounting.as_dict()
  assert bounded.version == unbounded.version == 3
  _assert_close(bounded.server_state, unbounded.server_state)
  # ... a difference far below how far the rounds moved the model.
  start = _simulation(SynchronousScheduler(48, LocalWork(steps=3)), make_aggregator(), None)
  moved = max(
    float(np.abs(np.asarray(a) - np.asarray(b)).max())
    for a, b in zip(
      jax.tree_util.tree_leaves(bounded.params), jax.tree_util.tree_leaves(start.params)
    )
  )
  assert moved > 1e-3


def test_an_aggregator_without_a_linear_form_gets_the_whole_round():
  def plain_mean(updates, scale):  # a reducer written as a function: no linear form
    total = updates.weights.sum()
    return jax.tree_util.tree_map(
      lambda d: jax.numpy.tensordot(scale, d, 1) / total, updates.deltas
    )

  aggregator = server_update(optax.sgd(1.0), plain_mean)
  assert aggregator.linear is None
  bounded = _sync(aggregator, 8)
  unbounded = _sync(server_update(optax.sgd(1.0), plain_mean), None)
  # Batches stay bounded; the round's updates are all held and stacked, as it needs them.
  assert set(bounded.executor.sizes) == {8}
  assert max(bounded.executor.held) == 40
  _assert_close(bounded.params, unbounded.params, atol=0)


def test_asynchronous_runs_compute_soonest_arrivals_in_bounded_batches():
  def fedbuff(max_batch_tasks):
    scheduler = AsynchronousScheduler(40, 12, LocalWork(steps=3, batch_size=4))
    aggregator = server_update(optax.sgd(1.0), staleness_scaled(count_mean(), polynomial(0.5)))
    sim = _simulation(scheduler, aggregator, max_batch_tasks)
    sim.run(StopCondition(max_versions=6))
    return sim

  unbounded, bounded = fedbuff(None), fedbuff(8)
  assert max(unbounded.executor.sizes) > 40  # all in flight, refills included, at once
  assert max(bounded.executor.sizes) == 8
  # Updates computed ahead of their arrival stay below a batch plus the buffer being filled.
  assert max(bounded.executor.held) <= 8 + 12
  assert bounded.accounting.as_dict() == unbounded.accounting.as_dict()
  np.testing.assert_array_equal(bounded.aggregated_counts, unbounded.aggregated_counts)
  _assert_close(bounded.params, unbounded.params)


@pytest.mark.parametrize(
  'reducer',
  [
    weighted_mean(),
    count_mean(),
    weighted_sum(),
    fednova_mean(),
    staleness_scaled(weighted_mean(), polynomial(0.5)),
    staleness_scaled(fednova_mean(), polynomial(1.0)),
  ],
)
def test_every_built_in_reducer_is_its_linear_form(reducer):
  assert isinstance(reducer, LinearReducer)
  rng = np.random.default_rng(0)
  deltas = {'w': rng.normal(size=(6, 3, 2)).astype(np.float32)}
  updates = UpdateBatch(
    deltas=deltas,
    weights=np.array([3, 1, 2, 5, 0, 0], np.float32),
    staleness=np.array([0, 2, 1, 4, 0, 0], np.int32),
    num_steps=np.array([5, 2, 8, 1, 0, 0], np.int32),
    group=np.zeros(6, np.int32),
  )
  scalars = updates.replace(deltas=None)
  a = np.asarray(reducer.numerators(scalars, scalars.weights))
  z = float(reducer.normalizer(scalars))
  # By hand: the numerators and the normaliser, summed in two chunks.
  summed = np.tensordot(a[:3], deltas['w'][:3], 1) + np.tensordot(a[3:], deltas['w'][3:], 1)
  np.testing.assert_allclose(
    np.asarray(reducer(updates, updates.weights)['w']), summed / z, rtol=1e-6
  )
  assert a[4:].tolist() == [0.0, 0.0]  # padding rows count in no sum


def test_weighted_mean_numerators_and_normaliser_by_hand():
  scalars = UpdateBatch(
    deltas=None,
    weights=np.array([3, 1, 0], np.float32),
    staleness=np.array([0, 3, 0], np.int32),
    num_steps=np.array([1, 1, 0], np.int32),
    group=np.zeros(3, np.int32),
  )
  reducer = staleness_scaled(weighted_mean(), polynomial(0.5))
  # c_k = w_k (1 + u_k)^-0.5: 3 * 1, 1 * 4^-0.5; Z = sum w = 4 (unscaled).
  np.testing.assert_allclose(
    np.asarray(reducer.numerators(scalars, scalars.weights)), [3.0, 0.5, 0.0], rtol=1e-6
  )
  assert float(reducer.normalizer(scalars)) == 4.0


def test_the_automatic_bound_holds_a_gibibyte_of_updates():
  assert resolve_max_batch_tasks(0, 796_840) == 1347  # the 784-200-200-10 MLP
  assert resolve_max_batch_tasks(0, 246_824) == 4096  # LeNet-5, capped
  assert resolve_max_batch_tasks(0, 44_700_000) == 24  # ResNet-18
  assert resolve_max_batch_tasks(0, 2_000_000_000) == 16  # the floor
  assert resolve_max_batch_tasks(7, 796_840) == 7  # explicit values stand
  with pytest.raises(ValueError, match='executor.max_batch_tasks=-1'):
    resolve_max_batch_tasks(-1, 1)


def test_the_simulation_resolves_the_automatic_bound_from_its_model():
  sim = _simulation(SynchronousScheduler(4, LocalWork(steps=1)), server_update(optax.sgd(1.0)), 0)
  assert sim.max_batch_tasks == 4096  # a tiny model: the cap
  with pytest.raises(ValueError, match='max_batch_tasks=-1'):
    _simulation(SynchronousScheduler(4, LocalWork(steps=1)), server_update(optax.sgd(1.0)), -1)
