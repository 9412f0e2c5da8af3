"""The stall rule: a run that cannot progress stops with one line; a large legitimate round or
buffer, and the stragglers of a closed round, never look like one.

Training is switched off (timeline-only runs of `NoTrainingExecutor`), so every case exercises
only the event loop and the schedulers. Most use a small `stall_events`, so that rounds larger
than it stay fast; one reproduces the default (100000) with a round of 100001 clients.
"""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.executor import NoTrainingExecutor
from fedsim_jax.runtime import PerStepLatency, Simulation, SimulationStalled, StopCondition
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  server_update,
)

PARAMS = {'w': jnp.zeros((3,))}
AGGREGATOR = server_update(optax.sgd(1.0))


def _timeline_run(num_clients, scheduler, **kwargs):
  return Simulation(
    executor=NoTrainingExecutor(PARAMS),
    scheduler=scheduler,
    aggregator=AGGREGATOR,
    latency=PerStepLatency(num_clients, np.random.default_rng(0), mean=1.0),
    init_params=PARAMS,
    client_sizes=np.full(num_clients, 10),
    rng=np.random.default_rng(1),
    aggregate=False,
    **kwargs,
  )


def test_a_synchronous_round_larger_than_stall_events_completes():
  sim = _timeline_run(5000, SynchronousScheduler(5000, LocalWork(steps=1)), stall_events=1000)
  sim.run(StopCondition(max_versions=2))
  assert sim.version == 2
  assert sim.accounting.aggregated == 10_000


def test_a_buffer_larger_than_stall_events_fills_from_few_clients():
  # FedBuff-like: 10 clients in flight, a version every 3000 arrivals.
  sim = _timeline_run(10, AsynchronousScheduler(10, 3000, LocalWork(steps=1)), stall_events=1000)
  sim.run(StopCondition(max_versions=1))
  assert sim.version == 1
  assert sim.accounting.aggregated == 3000


def test_the_stragglers_of_an_over_selected_round_are_not_a_stall():
  # 3000 selected, the fastest 400 aggregated; the next round waits for 2600 stragglers, which
  # are discarded (no version, no update held): the allowance per task in flight covers them.
  scheduler = SynchronousScheduler(400, LocalWork(steps=1), num_selected=3000)
  sim = _timeline_run(3000, scheduler, stall_events=1000)
  sim.run(StopCondition(max_versions=2))
  assert sim.version == 2
  assert sim.accounting.discarded['straggler'] == 2600


@pytest.mark.parametrize(
  ('cohort_size', 'events'),
  [(10, 1000), (600, 2400)],  # max(stall_events, 4 per task in flight)
)
def test_rounds_that_close_before_any_update_arrives_stall(cohort_size, events):
  scheduler = SynchronousScheduler(cohort_size, LocalWork(steps=1), deadline=1e-9)
  sim = _timeline_run(cohort_size, scheduler, stall_events=1000)
  with pytest.raises(SimulationStalled) as raised:
    sim.run(StopCondition(max_versions=1))
  message = str(raised.value)
  assert message.startswith(f'no server version in {events} events, none of them holding')
  assert f'{cohort_size} tasks in flight at most' in message
  assert '\n' not in message
  assert sim.version == 0


def test_rounds_of_zero_step_updates_stall():
  # A time limit shorter than any step: every update is held, then discarded as empty.
  scheduler = SynchronousScheduler(10, LocalWork(time_limit=1e-9))
  sim = _timeline_run(10, scheduler, stall_events=1000)
  with pytest.raises(SimulationStalled, match='^no server version in 1000 events'):
    sim.run(StopCondition(max_versions=1))
  assert sim.accounting.discarded['no_local_steps'] > 0


@pytest.mark.slow
def test_a_round_of_100001_clients_completes_under_the_default_limit():
  """The reported case at its scale: one round of more clients than the default
  `stall_events` (100000)."""
  sim = _timeline_run(100_001, SynchronousScheduler(100_001, LocalWork(steps=1)))
  sim.run(StopCondition(max_versions=1))
  assert sim.version == 1
  assert sim.accounting.aggregated == 100_001
