"""Schedulers see a `SchedulerContext`: the run's view and actions, not the simulation."""

import numpy as np
import optax
import pytest

from fedsim_jax.executor import NoTrainingExecutor
from fedsim_jax.runtime import PerStepLatency, SchedulerContext, Simulation, StopCondition
from fedsim_jax.strategy import server_update


class Recording:
  """Two-client rounds that record what their callbacks receive and see."""

  def __init__(self):
    self.seen = []

  def start(self, sim):
    self.seen.append(('start', type(sim), sim.now, sim.version))
    for client in sim.idle_clients():
      sim.dispatch(client, 2)
    self.arrived = []

  def on_arrival(self, sim, handle):
    self.seen.append(('arrival', handle.client_id, sim.now, sim.version, sim.is_busy(1)))
    self.arrived.append(handle)
    if len(self.arrived) == 2:
      sim.apply_updates(self.arrived, [1.0, 1.0])
      self.arrived = []
      # The action took effect at once: the view already shows the new version, and the
      # next round's tasks download it.
      assert sim.version == len([s for s in self.seen if s[0] == 'arrival']) // 2
      for client in sim.idle_clients():
        assert sim.dispatch(client, 2).version == sim.version

  def on_timer(self, sim, payload):
    raise AssertionError('no timers were set')


def _simulation(scheduler):
  params = {'w': np.zeros(3, np.float32)}
  return Simulation(
    executor=NoTrainingExecutor(params),
    scheduler=scheduler,
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(2, np.random.default_rng(0), mean=1.0),
    init_params=params,
    client_sizes=np.array([5, 7]),
    rng=np.random.default_rng(1),
    aggregate=False,
  )


def test_callbacks_receive_the_context_whose_actions_take_effect_at_once():
  scheduler = Recording()
  sim = _simulation(scheduler)
  sim.run(StopCondition(max_versions=3))
  assert scheduler.seen[0][:2] == ('start', SchedulerContext)
  arrivals = [s for s in scheduler.seen if s[0] == 'arrival']
  assert len(arrivals) == 6 and sim.version == 3
  # The view's time is each arrival's event time, and versions advance every two arrivals.
  assert [a[3] for a in arrivals] == [0, 0, 1, 1, 2, 2]
  assert all(b[2] >= a[2] for a, b in zip(arrivals, arrivals[1:]))


def test_the_context_does_not_expose_the_simulations_state():
  sim = _simulation(Recording())
  context = SchedulerContext(sim)
  for private in ('queue', 'accounting', 'server_state', 'executor', 'aggregator', 'latency'):
    with pytest.raises(AttributeError):
      getattr(context, private)
  with pytest.raises(AttributeError):
    context.version = 5  # the view is read-only
  assert (context.num_clients, context.client_sizes.tolist()) == (2, [5, 7])
  for counts in (context.client_sizes, context.aggregated_counts, context.dispatch_counts):
    with pytest.raises(ValueError, match='read-only'):
      counts[0] = 1


def test_download_time_reads_the_latency_model():
  sim = _simulation(Recording())
  latency = sim.sample_latency(0)
  # PerStepLatency has no `extra_download_time`: half the task's communication time.
  assert SchedulerContext(sim).download_time(0, latency) == latency.communication / 2
