"""A user-written aggregator (the README's example) runs under the built-in scheduler."""

import flax.struct
import jax
import numpy as np
import optax

from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import (
  Aggregator,
  PerStepLatency,
  Simulation,
  StopCondition,
  weighted_mean_delta,
)
from fedsim_jax.strategy import LocalWork, SynchronousScheduler, server_update


@flax.struct.dataclass
class State:
  params: dict


def damped_average(rate):
  def apply(state, updates):
    mean = weighted_mean_delta(updates)
    return State(jax.tree_util.tree_map(lambda p, d: p + rate * d, state.params, mean))

  return Aggregator(init=State, apply=apply)


def _run(aggregator):
  fed = toy_federation(num_clients=5)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  sim = Simulation(
    executor=Executor(
      sgd_client_update(model, optax.sgd(0.1), 4), fed.device_arrays(), jax.random.PRNGKey(1)
    ),
    scheduler=SynchronousScheduler(3, LocalWork(steps=3)),
    aggregator=aggregator,
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(0)),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(1),
  )
  sim.run(StopCondition(max_versions=3))
  return sim.params


def test_user_aggregator_equals_the_builtin_it_reimplements():
  custom = _run(damped_average(0.5))
  builtin = _run(server_update(optax.sgd(0.5)))
  for a, b in zip(jax.tree_util.tree_leaves(custom), jax.tree_util.tree_leaves(builtin)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
