"""CC-FedAvg: the skip-and-estimate rules on hand-computable deltas, and Algorithm 1 (history on
the clients) = Algorithm 2 (history on the server)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.algorithms.ccfedavg.scheduler import BudgetedScheduler, ccfedavg_server_aggregator
from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import Executor, TaskBatchResult, round_up_to_bucket
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition
from fedsim_jax.strategy import server_update
from fedsim_jax.strategy.local_work import LocalWork


class ScriptedSchedule:
  """trains(client, round) from a table: TRAINS[round] is the set of clients that train."""

  def __init__(self, trains):
    self.table = trains

  def trains(self, client, round_index, has_trained_before):
    del has_trained_before
    return client in self.table[round_index % len(self.table)]


class ConstantDeltaExecutor:
  """Client i always moves the model by (i + 1) on its only coordinate."""

  def run(self, tasks):
    rows = round_up_to_bucket(len(tasks))
    values = np.zeros((rows, 1), np.float32)
    values[: len(tasks), 0] = [t.client_id + 1 for t in tasks]
    return TaskBatchResult(
      deltas={'w': jnp.asarray(values)},
      aux={'steps_run': jnp.zeros(rows, jnp.int32)},
      num_tasks=len(tasks),
    )


def _run_scripted(estimator, table, rounds=3):
  scheduler = BudgetedScheduler(3, LocalWork(steps=1), ScriptedSchedule(table), estimator=estimator)
  sim = Simulation(
    executor=ConstantDeltaExecutor(),
    scheduler=scheduler,
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(3, np.random.default_rng(0)),
    init_params={'w': jnp.zeros(1)},
    client_sizes=np.full(3, 5),
    rng=np.random.default_rng(0),
  )
  trajectory = []
  sim.on_version = lambda s: trajectory.append(float(s.params['w'][0]))
  sim.run(StopCondition(max_versions=rounds))
  return trajectory, scheduler


# Round 0: everybody trains (deltas 1, 2, 3); round 1: only client 0 trains; round 2: nobody.
TABLE = [{0, 1, 2}, {0}, set()]


def test_strategy_3_resends_the_last_delta():
  trajectory, scheduler = _run_scripted('last_delta', TABLE)
  # x1 = 0 + (1 + 2 + 3) / 3 = 2; x2 = 2 + (1 + 2 + 3) / 3 = 4; x3 = 4 + 2 = 6.
  assert trajectory == [2.0, 4.0, 6.0]
  assert (scheduler.trained_updates, scheduler.estimated_updates) == (4, 5)


def test_strategy_2_resends_the_last_local_model():
  trajectory, _ = _run_scripted('last_model', TABLE)
  # Round 1: client 0 trains (+1); clients 1 and 2 resend models 0 + 2 and 0 + 3, i.e.
  # deltas 2 - 2 = 0 and 3 - 2 = 1: x2 = 2 + (1 + 0 + 1) / 3.
  x2 = 2 + 2 / 3
  # Round 2: last models are 2 + 1 (client 0), 2 and 3: deltas relative to x2.
  x3 = x2 + ((3 - x2) + (2 - x2) + (3 - x2)) / 3
  np.testing.assert_allclose(trajectory, [2.0, x2, x3], rtol=1e-6)


def test_strategy_1_ignores_skipping_clients_and_keeps_the_model_when_nobody_trains():
  trajectory, scheduler = _run_scripted('ignore', TABLE, rounds=4)
  # Round 1: only client 0's +1 counts; round 2: nobody trains, the round passes as a version
  # and the model stays; round 3 repeats round 0: + (1 + 2 + 3) / 3.
  assert trajectory == [2.0, 3.0, 3.0, 5.0]
  assert scheduler.round_index == 4 and scheduler.estimated_updates == 0


def test_rounds_where_nobody_ever_trains_again_still_end_the_run():
  # Everybody is past their quota from round 1 on (FedAvg dropout's tail): the run must reach
  # its round budget rather than start empty rounds forever.
  trajectory, scheduler = _run_scripted('ignore', [{0, 1, 2}] + [set()] * 50, rounds=6)
  assert trajectory == [2.0] * 6 and scheduler.round_index == 6


def test_switch_uses_strategy_3_then_strategy_2():
  early, _ = _run_scripted('last_delta', TABLE)
  scheduler = BudgetedScheduler(
    3, LocalWork(steps=1), ScriptedSchedule(TABLE), estimator='switch', switch_round=2
  )
  sim = Simulation(
    executor=ConstantDeltaExecutor(),
    scheduler=scheduler,
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(3, np.random.default_rng(0)),
    init_params={'w': jnp.zeros(1)},
    client_sizes=np.full(3, 5),
    rng=np.random.default_rng(0),
  )
  sim.run(StopCondition(max_versions=3))
  # Rounds 0-1 as Strategy 3 (x2 = 4); round 2 resends last models 3, 2 and 3 (x = 4 + ...).
  np.testing.assert_allclose(
    float(sim.params['w'][0]), 4 + ((3 - 4) + (2 - 4) + (3 - 4)) / 3, rtol=1e-6
  )
  assert early[1] == 4.0


def test_client_and_server_storage_give_the_same_models():
  fed = toy_federation(num_clients=6)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(6,))
  update = sgd_client_update(model, optax.sgd(0.2), 4)
  table = [{0, 1, 2, 3, 4, 5}, {1, 3}, {0, 5}, set(), {2, 4}]
  results = {}
  for storage in ('client', 'server'):
    aggregator = (
      server_update(optax.sgd(1.0))
      if storage == 'client'
      else ccfedavg_server_aggregator(fed.num_clients)
    )
    sim = Simulation(
      executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1)),
      scheduler=BudgetedScheduler(4, LocalWork(steps=3), ScriptedSchedule(table), storage=storage),
      aggregator=aggregator,
      latency=PerStepLatency(fed.num_clients, np.random.default_rng(0)),
      init_params=model.init(jax.random.PRNGKey(0)),
      client_sizes=fed.client_sizes,
      rng=np.random.default_rng(3),
    )
    sim.run(StopCondition(max_versions=8))
    results[storage] = sim.params
  for a, b in zip(
    jax.tree_util.tree_leaves(results['client']), jax.tree_util.tree_leaves(results['server'])
  ):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_invalid_settings():
  with pytest.raises(ValueError, match="^estimator='guess'; allowed"):
    BudgetedScheduler(2, LocalWork(steps=1), ScriptedSchedule([set()]), estimator='guess')
  with pytest.raises(ValueError, match='storage'):
    BudgetedScheduler(
      2, LocalWork(steps=1), ScriptedSchedule([set()]), estimator='last_model', storage='server'
    )
