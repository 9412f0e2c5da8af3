"""Property-based checks of the runtime's invariants over random scheduling configurations.

Training is switched off (`NoTrainingExecutor`), so every example exercises only the event
loop, the schedulers and the accounting.
"""

import copy

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsim_jax.executor import NoTrainingExecutor
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition
from fedsim_jax.runtime.latency.base import jittered, positive_normal
from fedsim_jax.runtime.latency.trace import PeriodicAvailability
from fedsim_jax.runtime.sampling import choose_without_replacement
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  server_update,
)

PARAMS = {'w': jnp.zeros((3,))}
AGGREGATOR = server_update(optax.sgd(1.0))  # one aggregator: its jitted apply compiles once


@st.composite
def scenarios(draw):
  num_clients = draw(st.integers(2, 12))
  kind = draw(st.sampled_from(['sync', 'async']))
  if kind == 'sync':
    cohort = draw(st.integers(1, num_clients))
    selected = draw(st.integers(cohort, num_clients))
    deadline = draw(st.one_of(st.none(), st.floats(0.5, 20.0)))
    scheduler = SynchronousScheduler(
      cohort, LocalWork(steps=draw(st.integers(1, 5))), num_selected=selected, deadline=deadline
    )
    cap = num_clients
  else:
    concurrency = draw(st.integers(1, num_clients))
    max_staleness = draw(st.one_of(st.none(), st.integers(0, 3)))
    scheduler = AsynchronousScheduler(
      concurrency,
      draw(st.integers(1, 4)),
      LocalWork(steps=draw(st.integers(1, 5))),
      max_staleness=max_staleness,
    )
    cap = concurrency
  seed = draw(st.integers(0, 2**16))
  latency = PerStepLatency(
    num_clients,
    np.random.default_rng(seed),
    mean=1.0,
    distribution=draw(st.sampled_from(['homogeneous', 'normal', 'exponential'])),
    jitter=draw(st.sampled_from([0.0, 0.05])),
    communication_time=draw(st.sampled_from([0.0, 0.5])),
  )
  availability = None
  if draw(st.booleans()):
    availability = PeriodicAvailability(
      num_clients,
      np.random.default_rng(seed + 1),
      online_fraction=draw(st.floats(0.3, 1.0)),
      period=draw(st.floats(5.0, 50.0)),
    )
  return num_clients, scheduler, cap, latency, availability, seed


def make_simulation(num_clients, scheduler, latency, availability=None, seed=0, **kwargs):
  """A simulation of `num_clients` clients of 10 examples that trains nothing."""
  return Simulation(
    executor=NoTrainingExecutor(PARAMS),
    scheduler=scheduler,
    aggregator=AGGREGATOR,
    latency=latency,
    availability=availability,
    init_params=PARAMS,
    client_sizes=np.full(num_clients, 10),
    rng=np.random.default_rng(seed),
    **kwargs,
  )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_runtime_invariants(scenario):
  num_clients, scheduler, cap, latency, availability, seed = scenario
  sim = make_simulation(num_clients, scheduler, latency, availability, seed)
  times, handles, dispatch_version = [], [], {}

  def check(name, original):
    def wrapped(*args):
      assert not times or sim.now >= times[-1], 'the virtual clock went back'
      times.append(sim.now)
      assert sim.accounting.in_flight <= cap
      sim.accounting.check()
      return original(*args)

    setattr(scheduler, name, wrapped)

  for hook in ('on_arrival', 'on_timer', 'on_dropout'):
    check(hook, getattr(scheduler, hook))

  dispatch = sim.dispatch

  def recording_dispatch(client, steps, **kwargs):
    handle = dispatch(client, steps, **kwargs)
    dispatch_version[handle.task_id] = sim.version
    handles.append(handle)
    return handle

  sim.dispatch = recording_dispatch
  apply_updates = sim.apply_updates

  def checked_apply(batch_handles, weights):
    expected = [sim.version - dispatch_version[h.task_id] for h in batch_handles]
    staleness = np.asarray(sim.updates(batch_handles, weights).staleness)[: len(batch_handles)]
    np.testing.assert_array_equal(staleness, expected)
    if getattr(scheduler, 'max_staleness', None) is not None:
      assert max(expected) <= scheduler.max_staleness
    apply_updates(batch_handles, weights)

  sim.apply_updates = checked_apply
  sim.run(StopCondition(max_client_updates=40, max_virtual_time=500.0))

  for h in handles:
    if h.status != 'dropped_out' and h.status != 'in_flight':
      assert h.arrival_time == h.dispatch_time + h.latency.duration(h.num_steps)
    assert h.version == dispatch_version[h.task_id]
  statuses = [h.status for h in handles]
  report = sim.report()['tasks']
  assert report['dispatched'] == len(handles)
  assert report['aggregated'] == statuses.count('aggregated')
  assert report['in_flight'] == statuses.count('in_flight')
  assert report['waiting'] == statuses.count('arrived')
  assert sum(report['discarded'].values()) == (
    statuses.count('discarded') + statuses.count('dropped_out')
  )


def _timeline(sim):
  """What a run's schedule produced: versions, clock, accounting and per-client figures."""
  return (
    sim.version,
    sim.now,
    sim.client_updates,
    sim.gradient_steps,
    sim.report()['tasks'],
    sim.dispatch_counts.tolist(),
    sim.aggregated_counts.tolist(),
    sim.busy_time.tolist(),
  )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_timeline_only_runs_the_same_schedule(scenario):
  """`aggregate=False` skips computing, stacking and applying updates; the schedule (which
  never depends on the weights) is that of the aggregating run, and the model stays."""
  num_clients, scheduler, _, latency, availability, seed = scenario
  runs = []
  for aggregate in (True, False):  # fresh copies: a run advances its scheduler and streams
    sim = make_simulation(
      num_clients,
      copy.deepcopy(scheduler),
      copy.deepcopy(latency),
      copy.deepcopy(availability),
      seed,
      aggregate=aggregate,
    )
    sim.run(StopCondition(max_client_updates=40, max_virtual_time=500.0))
    runs.append(sim)
  aggregating, timeline = runs
  assert _timeline(aggregating) == _timeline(timeline)
  assert timeline.executor.tasks_run == 0 and timeline.params is PARAMS


def test_timeline_only_refuses_to_read_results():
  sim = Simulation(
    executor=NoTrainingExecutor(PARAMS),
    scheduler=AsynchronousScheduler(2, 1, LocalWork(steps=1)),
    aggregator=AGGREGATOR,
    latency=PerStepLatency(3, np.random.default_rng(0)),
    init_params=PARAMS,
    client_sizes=np.full(3, 10),
    rng=np.random.default_rng(0),
    aggregate=False,
  )
  handles = []
  dispatch = sim.dispatch
  sim.dispatch = lambda *a, **k: handles.append(dispatch(*a, **k)) or handles[-1]
  sim.run(StopCondition(max_versions=3))
  assert sim.version == 3
  arrived = [h for h in handles if h.status == 'aggregated']
  with pytest.raises(ValueError, match='aggregate=False'):
    sim.updates(arrived[:1], [1.0])


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pool_size=st.integers(1, 3000), k=st.integers(1, 4))
def test_fast_client_choice_draws_what_generator_choice_draws(seed, pool_size, k):
  k = min(k, pool_size)
  pool = np.arange(pool_size) * 3 + 1
  fast, reference = np.random.default_rng(seed), np.random.default_rng(seed)
  for _ in range(3):  # the streams stay in step afterwards too
    np.testing.assert_array_equal(
      choose_without_replacement(fast, pool, k), reference.choice(pool, k, replace=False)
    )
    assert fast.normal() == reference.normal()


def test_jittered_latency_draws_what_positive_normal_draws():
  fast, reference = np.random.default_rng(3), np.random.default_rng(3)
  for _ in range(1000):  # std 0.9: some draws are redrawn
    assert jittered(fast, 1.0, 0.9) == float(positive_normal(reference, 1.0, 0.9))
