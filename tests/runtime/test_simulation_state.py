"""What a simulation's checkpoint holds (`runtime.simulation_state`): the stored names are the
layout of every checkpoint written so far, whichever part of the simulation holds each value,
and a state saved with plain-string task statuses (before `TaskStatus`) restores and runs on
to the same result."""

import pickle

import jax
import numpy as np
import optax

from fedsim_jax.client import sgd_client_update
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, TaskStatus
from fedsim_jax.strategy import AsynchronousScheduler, LocalWork, server_update

# The names (and order) of a checkpoint's simulation state since before the simulation was
# split into parts: a checkpoint written then must restore now.
STORED_NAMES = [
  'scheduler',
  'latency',
  'availability',
  'client_sizes',
  'rng',
  'deferred',
  'bucket_bits',
  'aggregate',
  'stall_events',
  '_events_without_progress',
  '_most_held',
  '_most_in_flight',
  'server_state',
  'queue',
  'now',
  'version',
  'accounting',
  'executor_batches',
  'executed_tasks',
  'gradient_steps',
  'dispatch_counts',
  'aggregated_counts',
  'busy_time',
  'steps_per_client',
  'update_wait_time',
  'discarded_counts',
  'staleness_counts',
  'window_staleness_counts',
  'wasted_steps',
  '_unresolved',
  '_busy',
  '_not_busy',
  '_always_available',
  '_pending',
  '_held_results',
  '_next_task_id',
  '_started',
]


def _simulation(fed):
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  update = sgd_client_update(model, optax.sgd(0.2), 4)
  return Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(11), backend='loop'),
    scheduler=AsynchronousScheduler(concurrency=3, buffer_size=2, local_work=LocalWork(steps=3)),
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(1), jitter=0.05),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(2),
  )


def _with_string_statuses(state):
  """`state` as a checkpoint written before `TaskStatus` holds it: statuses plain strings."""
  state = pickle.loads(pickle.dumps(state))
  # A pending task is unresolved too: one object in both, converted once.
  handles = {id(h): h for h in [*state['_unresolved'].values(), *state['_pending']]}
  for handle in handles.values():
    handle.status = str(handle.status.value)
  return state


def test_the_stored_names_are_those_of_every_checkpoint_so_far(toy_federation):
  sim = _simulation(toy_federation)
  sim.run(StopCondition(max_versions=2))
  assert list(sim.state()) == STORED_NAMES


def test_a_state_with_string_statuses_restores_and_runs_on_unchanged(toy_federation):
  whole = _simulation(toy_federation)
  whole.run(StopCondition(max_versions=6))
  first = _simulation(toy_federation)
  first.run(StopCondition(max_versions=3))
  state = _with_string_statuses(first.state())
  assert any(type(h.status) is str for h in state['_unresolved'].values())
  resumed = _simulation(toy_federation)
  resumed.restore(state)
  resumed.run(StopCondition(max_versions=6))
  assert (resumed.now, resumed.version) == (whole.now, whole.version)
  assert resumed.accounting.as_dict() == whole.accounting.as_dict()
  for got, want in zip(
    jax.tree_util.tree_leaves(resumed.params), jax.tree_util.tree_leaves(whole.params)
  ):
    np.testing.assert_array_equal(got, want)


def test_task_statuses_are_task_status_members_equal_to_their_names(toy_federation):
  sim = _simulation(toy_federation)
  sim.run(StopCondition(max_versions=1))
  statuses = {h.status for h in sim.state()['_unresolved'].values()}
  assert statuses and all(isinstance(s, TaskStatus) for s in statuses)
  assert TaskStatus.ARRIVED == 'arrived' and f'{TaskStatus.IN_FLIGHT}' == 'in_flight'
