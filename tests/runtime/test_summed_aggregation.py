"""Rounds of a linear aggregator summed as their tasks train (`Executor.add_weighted_sum`, the
loop backend): the same sum as the stacked deltas' up to float rounding, the same bits whatever
the number of task threads, no round's deltas held, and the stacked path wherever a result was
read before the aggregation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.client import sgd_client_update
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import ClientTask, Executor
from fedsim_jax.executor.executor import SUM_SHARE_TASKS
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  count_mean,
  server_update,
  staleness_scaled,
)
from fedsim_jax.strategy.staleness import polynomial


def _federation():
  return toy_federation(num_clients=24, min_size=8, max_size=16, seed=3)


def _executor(fed, threads=1, **settings):
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  update = sgd_client_update(model, optax.sgd(0.2), 4)
  executor = Executor(
    update, fed.device_arrays(), jax.random.PRNGKey(11), backend='loop', threads=threads,
    **settings,
  )  # fmt: skip
  return executor, model


class Counting:
  """Wraps an executor; counts the batches it stacks (`run`) and the tasks it sums."""

  def __init__(self, executor, sums_tasks=None):
    self.executor = executor
    self.stacked = []
    self.summed = []
    self.held = []
    self.simulation = None
    self.sums_tasks = executor.sums_tasks if sums_tasks is None else sums_tasks

  def run(self, tasks):
    self.stacked.append(len(tasks))
    return self.executor.run(tasks)

  def add_weighted_sum(self, total, tasks, coefficients):
    self.summed.append(len(tasks))
    self.held.append(len(self.simulation.tasks.held_results))
    return self.executor.add_weighted_sum(total, tasks, coefficients)

  def __getattr__(self, name):
    return getattr(self.executor, name)


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def _tasks(model, count):
  # Two start models (tasks dispatched at two versions), uneven steps, some of zero steps.
  first = model.init(jax.random.PRNGKey(0))
  second = jax.tree_util.tree_map(lambda p: 0.5 * p, first)
  return [ClientTask(c % 24, (3 * c) % 7, c, first if c % 3 else second) for c in range(count)]


@pytest.mark.parametrize('count', [1, SUM_SHARE_TASKS, 2 * SUM_SHARE_TASKS + 3])
def test_the_sum_is_the_stacked_deltas_sum_and_the_same_bits_for_any_threads(count):
  fed = _federation()
  executor, model = _executor(fed)
  tasks = _tasks(model, count)
  coefficients = np.linspace(0.5, 2.0, count).astype(np.float32)
  total = jax.tree_util.tree_map(
    lambda p: jnp.full_like(p, 0.25), model.init(jax.random.PRNGKey(0))
  )
  stacked = executor.run(tasks).deltas
  want = jax.tree_util.tree_map(lambda t, d: t + np.tensordot(coefficients, d, 1), total, stacked)
  sums = []
  for threads in (1, 2, 3):
    executor, _ = _executor(fed, threads)
    assert executor.sums_tasks
    sums.append(executor.add_weighted_sum(total, tasks, coefficients))
    assert executor.tasks_run == count
    assert executor.steps_run == executor.steps_computed == sum(t.num_steps for t in tasks)
  for got, expected in zip(_leaves(sums[0]), _leaves(want)):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  for other in sums[1:]:  # shares are added in their order, whichever thread ran them
    for got, expected in zip(_leaves(other), _leaves(sums[0])):
      np.testing.assert_array_equal(got, expected)


def test_other_step_loops_sum_their_stacked_deltas():
  fed = _federation()
  for settings in ({'unroll': 2}, {'step_loop': 'host'}):
    executor, model = _executor(fed, **settings)
    assert not executor.sums_tasks
    tasks = _tasks(model, 5)
    coefficients = np.arange(1, 6, dtype=np.float32)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, model.init(jax.random.PRNGKey(0)))
    got = executor.add_weighted_sum(zeros, tasks, coefficients)
    deltas = executor.run(tasks).deltas
    for leaf, stacked in zip(_leaves(got), _leaves(deltas)):
      np.testing.assert_allclose(leaf, np.tensordot(coefficients, stacked, 1), rtol=1e-6)


def _simulation(scheduler, aggregator, executor, model, fed):
  sim = Simulation(
    executor=executor,
    scheduler=scheduler,
    aggregator=aggregator,
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(1), mean=1.0, jitter=0.05),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(2),
    max_batch_tasks=None,
  )
  executor.simulation = sim
  return sim


def _fedavg(threads, sums_tasks=None):
  fed = _federation()
  executor, model = _executor(fed, threads)
  counting = Counting(executor, sums_tasks)
  scheduler = SynchronousScheduler(20, LocalWork(steps=3, batch_size=4))
  sim = _simulation(scheduler, server_update(optax.sgd(1.0)), counting, model, fed)
  sim.run(StopCondition(max_versions=3))
  return sim


def test_a_synchronous_round_is_summed_as_it_trains_to_the_stacked_rounds_model():
  summed = _fedavg(threads=1)
  assert summed.executor.summed == [20, 20, 20] and summed.executor.stacked == []
  assert summed.executor.held == [0, 0, 0]  # no round's deltas held
  assert summed.tasks.executed_tasks == 60
  stacked = _fedavg(threads=1, sums_tasks=False)
  assert stacked.executor.stacked == [20, 20, 20] and stacked.executor.summed == []
  assert summed.accounting.as_dict() == stacked.accounting.as_dict()
  for got, want in zip(_leaves(summed.params), _leaves(stacked.params)):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  threaded = _fedavg(threads=2)
  for got, want in zip(_leaves(threaded.params), _leaves(summed.params)):
    np.testing.assert_array_equal(got, want)


def test_a_buffer_aggregated_while_other_tasks_are_in_flight_is_stacked_with_them():
  # FedBuff: when K updates are aggregated, the other tasks in flight are pending too; they
  # are computed in the same batch (keeping the task threads busy), so the buffer is stacked.
  fed = _federation()
  executor, model = _executor(fed)
  counting = Counting(executor)
  scheduler = AsynchronousScheduler(10, 4, LocalWork(steps=3, batch_size=4))
  aggregator = server_update(optax.sgd(1.0), staleness_scaled(count_mean(), polynomial(0.5)))
  sim = _simulation(scheduler, aggregator, counting, model, fed)
  sim.run(StopCondition(max_versions=6))
  assert counting.summed == [] and max(counting.stacked) >= 10


def test_a_round_larger_than_the_bound_is_summed_chunk_by_chunk_as_it_trains():
  fed = _federation()
  executor, model = _executor(fed, threads=2)
  counting = Counting(executor)
  scheduler = SynchronousScheduler(20, LocalWork(steps=3, batch_size=4))
  sim = _simulation(scheduler, server_update(optax.sgd(1.0)), counting, model, fed)
  sim.summed_aggregation.chunk_tasks = 8  # as `max_batch_tasks=8` sets it
  sim.run(StopCondition(max_versions=2))
  assert counting.summed == [8, 8, 4, 8, 8, 4] and counting.stacked == []
  whole = _simulation(
    SynchronousScheduler(20, LocalWork(steps=3, batch_size=4)),
    server_update(optax.sgd(1.0)),
    Counting(_executor(fed)[0]),
    model,
    fed,
  )
  whole.run(StopCondition(max_versions=2))
  assert whole.executor.summed == [20, 20]
  for got, want in zip(_leaves(sim.params), _leaves(whole.params)):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_a_round_whose_results_were_read_is_stacked():
  fed = _federation()
  executor, model = _executor(fed)
  counting = Counting(executor)
  read = []

  def read_every_result(sim, closing):  # a scheduler that reads results before aggregating
    read.extend(float(sim.task_aux(h)['train_loss']) for h in closing.aggregated)
    return None

  scheduler = SynchronousScheduler(
    6, LocalWork(steps=2, batch_size=4), round_closing=read_every_result
  )
  sim = _simulation(scheduler, server_update(optax.sgd(1.0)), counting, model, fed)
  sim.run(StopCondition(max_versions=2))
  assert len(read) == 12 and all(np.isfinite(read))
  assert counting.summed == [] and counting.stacked == [6, 6]
