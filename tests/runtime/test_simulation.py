"""Virtual-time runtime: event order, latency models, deferred == eager execution."""

import jax
import numpy as np
import optax
import pytest

from fedsim_jax.client import sgd_client_update
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import EventKind, EventQueue, PerStepLatency, Simulation, StopCondition
from fedsim_jax.strategy import LocalWork, SynchronousScheduler, server_update


class TestEventQueue:
  def test_pops_by_time_then_insertion_order(self):
    queue = EventQueue()
    queue.push(2.0, EventKind.TIMER, 'late')
    queue.push(1.0, EventKind.ARRIVAL, 'first')
    queue.push(1.0, EventKind.TIMER, 'second')
    queue.push(0.5, EventKind.ARRIVAL, 'earliest')
    assert [queue.pop().payload for _ in range(4)] == ['earliest', 'first', 'second', 'late']
    assert len(queue) == 0


class TestPerStepLatency:
  def test_homogeneous_without_jitter_is_exact(self):
    model = PerStepLatency(3, np.random.default_rng(0), mean=0.15, communication_time=2.0)
    assert model.task_duration(1, 100) == pytest.approx(17.0)

  def test_distributions_and_jitter_statistics(self):
    rng = np.random.default_rng(0)
    normal = PerStepLatency(20000, rng, mean=0.15, distribution='normal', spread=0.3)
    assert normal.step_time.min() > 0
    assert normal.step_time.mean() == pytest.approx(0.15, rel=0.02)
    assert normal.step_time.std() == pytest.approx(0.045, rel=0.05)
    expo = PerStepLatency(20000, rng, mean=0.15, distribution='exponential')
    assert expo.step_time.mean() == pytest.approx(0.15, rel=0.03)
    jittered = PerStepLatency(1, rng, mean=2.0, jitter=0.05)
    draws = np.array([jittered.task_duration(0, 10) for _ in range(4000)])
    assert draws.mean() == pytest.approx(20.0, rel=0.01)
    assert draws.std() == pytest.approx(1.0, rel=0.1)

  def test_same_seed_same_speeds(self):
    a = PerStepLatency(50, np.random.default_rng(5), distribution='exponential')
    b = PerStepLatency(50, np.random.default_rng(5), distribution='exponential')
    np.testing.assert_array_equal(a.step_time, b.step_time)

  @pytest.mark.parametrize(
    'kwargs,match',
    [
      ({'distribution': 'pareto'}, 'latency.kwargs.distribution'),
      ({'mean': 0.0}, 'latency.kwargs.mean'),
      ({'jitter': -0.1}, 'latency.kwargs.jitter'),
    ],
  )
  def test_invalid_settings(self, kwargs, match):
    with pytest.raises(ValueError, match=match):
      PerStepLatency(3, np.random.default_rng(0), **kwargs)


def _simulation(fed, *, deferred, backend='vmap', cohort=3, distribution='normal', steps=4):
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  update = sgd_client_update(model, optax.sgd(0.2), 4)
  executor = Executor(update, fed.device_arrays(), jax.random.PRNGKey(11), backend=backend)
  scheduler = SynchronousScheduler(cohort, LocalWork(steps=steps, batch_size=4))
  latency = PerStepLatency(
    fed.num_clients, np.random.default_rng(1), mean=1.0, distribution=distribution, jitter=0.05
  )
  return Simulation(
    executor=executor,
    scheduler=scheduler,
    aggregator=server_update(optax.sgd(1.0)),
    latency=latency,
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(2),
    deferred=deferred,
  )


class TestDeferredExecution:
  @pytest.mark.parametrize('backend', ['vmap', 'loop'])
  def test_deferred_equals_eager(self, toy_federation, backend):
    runs = {}
    for deferred in (True, False):
      sim = _simulation(toy_federation, deferred=deferred, backend=backend)
      sim.run(StopCondition(max_versions=4))
      runs[deferred] = sim
    assert runs[True].now == runs[False].now
    assert runs[True].client_updates == runs[False].client_updates == 12
    # Deferred runs a whole cohort in one batch; eager runs one task per batch, including the
    # fifth round's three tasks, dispatched at the last aggregation, that deferral never runs.
    assert runs[True].executor_batches == 4
    assert runs[False].executor_batches == 15
    for a, b in zip(
      jax.tree_util.tree_leaves(runs[True].params), jax.tree_util.tree_leaves(runs[False].params)
    ):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)

  def test_round_ends_at_the_slowest_clients_arrival(self, toy_federation):
    sim = _simulation(toy_federation, deferred=True, distribution='exponential')
    arrivals = []
    original = sim.scheduler.on_arrival

    def spy(s, handle):
      arrivals.append((handle.version, handle.arrival_time))
      original(s, handle)

    sim.scheduler.on_arrival = spy
    sim.run(StopCondition(max_versions=3))
    for version in range(3):
      round_arrivals = [t for v, t in arrivals if v == version]
      assert len(round_arrivals) == 3
    # Version v's round starts when round v-1's slowest client arrives.
    round_end = max(t for v, t in arrivals if v == 2)
    assert sim.now == pytest.approx(round_end)

  def test_stop_on_virtual_time_and_client_updates(self, toy_federation):
    sim = _simulation(toy_federation, deferred=True, distribution='homogeneous')
    sim.run(StopCondition(max_virtual_time=10.0))  # each round takes 4 steps * ~1 s
    assert sim.now == 10.0
    assert sim.version == 2
    sim2 = _simulation(toy_federation, deferred=True)
    sim2.run(StopCondition(max_client_updates=7))
    assert sim2.client_updates == 7


@pytest.mark.parametrize('windows', [None, [[(0.0, 10.0)], None, [(5.0, 9.0)], None, None, None]])
def test_draw_idle_client_draws_as_choice_over_idle_clients(toy_federation, windows):
  from fedsim_jax.runtime.latency import WindowAvailability
  from fedsim_jax.runtime.sampling import choose_without_replacement

  sim = _simulation(toy_federation, deferred=True)
  if windows is not None:
    sim = Simulation(
      executor=sim.executor,
      scheduler=sim.scheduler,
      aggregator=server_update(optax.sgd(1.0)),
      latency=sim.latency,
      init_params=sim.params,
      client_sizes=sim.client_sizes,
      rng=sim.rng,
      availability=WindowAvailability(windows),
    )
  for client in (4, 1, 0):
    sim.dispatch(client, 1)
  sim.dispatch(4, 1)  # two tasks in flight: client 4 stays busy after one ends
  expected_idle = [2, 3, 5] if windows is None else [3, 5]  # client 2 is offline at t=0
  np.testing.assert_array_equal(sim.idle_clients(), expected_idle)
  for seed in range(20):
    drawn = sim.draw_idle_client(np.random.default_rng(seed))
    assert (
      drawn == choose_without_replacement(np.random.default_rng(seed), sim.idle_clients(), 1)[0]
    )
  for client in sim.idle_clients():
    sim.dispatch(client, 1)
  assert sim.draw_idle_client(np.random.default_rng(0)) is None
  sim.run(StopCondition(max_client_updates=1))  # an arrival frees its client
  freed = sim.idle_clients()
  assert len(freed) == 1 and sim.draw_idle_client(np.random.default_rng(0)) == freed[0]
