"""The task trace and the statistics drawn from the simulation's counters: every dispatched task
is traced once with the outcome the accounting gives it, and the staleness, fairness and waste
figures match the trace and hand-computed cases."""

import collections
import copy

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings

from fedsim_jax.runtime import PerStepLatency, StopCondition
from fedsim_jax.runtime.statistics import (
  jain_fairness,
  staleness_histogram,
  staleness_summary,
  statistics,
)
from fedsim_jax.strategy import AsynchronousScheduler, LocalWork, server_update
from tests.runtime.test_scheduling_properties import make_simulation, scenarios

PARAMS = {'w': jnp.zeros((3,))}
AGGREGATOR = server_update(optax.sgd(1.0))


class ListLog:
  def __init__(self):
    self.records = []

  def write(self, record):
    self.records.append(record)


def _simulation(num_clients, scheduler, latency, availability=None, seed=0, aggregate=True):
  log = ListLog()
  sim = make_simulation(
    num_clients, scheduler, latency, availability, seed, aggregate=aggregate, task_log=log
  )
  return sim, log


def check_trace_agrees_with_accounting(sim, records):
  """The invariants a trace holds at the end of any run (`write_unresolved_tasks` called)."""
  tasks = [r for r in records if r['outcome'] != 'skipped']
  assert sorted(r['task'] for r in tasks) == sorted({r['task'] for r in tasks})  # once each
  assert len(tasks) == sim.accounting.dispatched
  outcomes = collections.Counter(r['outcome'] for r in tasks)
  assert outcomes['aggregated'] == sim.accounting.aggregated
  assert outcomes['in_flight'] == sim.accounting.in_flight
  assert outcomes['waiting'] == sim.accounting.waiting
  reasons = collections.Counter(r['reason'] for r in tasks if r['outcome'] == 'discarded')
  assert reasons == sim.accounting.discarded
  aggregated = [r for r in tasks if r['outcome'] == 'aggregated']
  per_client = np.bincount([r['client'] for r in aggregated], minlength=sim.num_clients)
  np.testing.assert_array_equal(per_client, sim.aggregated_counts)
  histogram = np.bincount([r['staleness'] for r in aggregated]).tolist() if aggregated else []
  assert histogram == staleness_histogram(sim)
  for r in aggregated:
    assert r['staleness'] == r['applied_version'] - 1 - r['version'] or (
      r['staleness'] == r['applied_version'] - r['version']  # folded in without a version
    )
    assert r['dispatch_time'] <= r['end_time'] <= r['aggregation_time']
  wasted = sum(r['steps'] for r in tasks if r['outcome'] == 'discarded')
  assert wasted == sim.wasted_steps
  delivered = sum(r['steps'] for r in tasks if r['outcome'] in ('aggregated', 'discarded'))
  delivered += sum(r['steps'] for r in tasks if r['outcome'] == 'waiting')
  assert delivered == sim.gradient_steps


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_dispatched_task_is_traced_once_with_its_accounted_outcome(scenario):
  num_clients, scheduler, _, latency, availability, seed = scenario
  traces = []
  for aggregate in (True, False):  # the timeline-only mode traces the same schedule
    sim, log = _simulation(
      num_clients,
      copy.deepcopy(scheduler),
      copy.deepcopy(latency),
      copy.deepcopy(availability),
      seed,
      aggregate,
    )
    sim.run(StopCondition(max_client_updates=40, max_virtual_time=500.0))
    sim.write_unresolved_tasks()
    check_trace_agrees_with_accounting(sim, log.records)
    traces.append(log.records)
  assert traces[0] == traces[1]


def test_staleness_with_homogeneous_clients_is_hand_computable():
  """Three tasks in flight, buffer 1, every task 1 s: the three arrivals at each whole second
  make versions 3k+1, 3k+2, 3k+3 from a model of version 3k, staleness 0, 1 and 2."""
  latency = PerStepLatency(5, np.random.default_rng(0), mean=1.0, distribution='homogeneous')
  sim, log = _simulation(5, AsynchronousScheduler(3, 1, LocalWork(steps=1)), latency)
  sim.run(StopCondition(max_versions=9))
  aggregated = [r for r in log.records if r['outcome'] == 'aggregated']
  assert [r['staleness'] for r in aggregated] == [0, 1, 2] * 3
  assert [r['applied_version'] for r in aggregated] == list(range(1, 10))
  assert [r['version'] for r in aggregated] == [0, 0, 0, 3, 3, 3, 6, 6, 6]
  assert [r['end_time'] for r in aggregated] == [1.0] * 3 + [2.0] * 3 + [3.0] * 3
  stats = statistics(sim, window=True)
  assert stats['staleness_mean'] == 1.0
  assert (stats['staleness_p50'], stats['staleness_p95'], stats['staleness_max']) == (1, 2, 2)
  sim.reset_window()
  sim.run(StopCondition(max_versions=10))
  window = statistics(sim, window=True)
  assert window['staleness_window_mean'] == window['staleness_window_max'] == 0
  assert window['staleness_max'] == 2


def test_stale_updates_are_discarded_and_count_as_wasted_compute():
  latency = PerStepLatency(5, np.random.default_rng(0), mean=1.0, distribution='homogeneous')
  scheduler = AsynchronousScheduler(3, 1, LocalWork(steps=2), max_staleness=1)
  sim, log = _simulation(5, scheduler, latency)
  sim.run(StopCondition(max_versions=6))
  discarded = [r for r in log.records if r['outcome'] == 'discarded']
  assert discarded and {r['reason'] for r in discarded} == {'stale'}
  assert sim.wasted_steps == 2 * len(discarded)
  stats = statistics(sim)
  assert stats['wasted_fraction'] == pytest.approx(sim.wasted_steps / sim.gradient_steps)
  assert stats['aggregated_share'] == pytest.approx(6 / (6 + len(discarded)))


def test_staleness_summary_uses_nearest_rank_percentiles():
  counts = np.array([5, 3, 0, 1, 1])  # values 0 x5, 1 x3, 3, 4
  assert staleness_summary(counts) == {'mean': 1.0, 'p50': 0, 'p95': 4, 'max': 4}
  assert staleness_summary(np.array([0, 2])) == {'mean': 1.0, 'p50': 1, 'p95': 1, 'max': 1}
  assert staleness_summary(np.zeros(4, int))['mean'] is None


def test_jain_fairness_index():
  assert jain_fairness(np.array([3, 3, 3])) == 1.0
  assert jain_fairness(np.array([4, 0, 0, 0])) == 0.25
  assert jain_fairness(np.array([1, 3])) == pytest.approx(16 / (2 * 10))
  assert jain_fairness(np.zeros(3)) is None


def test_client_classes_get_their_aggregated_share():
  latency = PerStepLatency(4, np.random.default_rng(0), mean=1.0, distribution='homogeneous')
  sim, _ = _simulation(4, AsynchronousScheduler(2, 1, LocalWork(steps=1)), latency)
  sim.run(StopCondition(max_versions=4))
  sim.aggregated_counts[:] = [2, 2, 0, 0]
  sim.discarded_counts[:] = [0, 0, 1, 3]
  mask = np.array([False, False, True, True])
  stats = statistics(sim, {'straggler': mask, 'standard': ~mask})
  assert stats['straggler_aggregated_share'] == 0.0
  assert stats['standard_aggregated_share'] == 1.0
  assert stats['aggregated_share'] == 0.5
