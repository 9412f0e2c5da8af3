"""Runs of registered algorithms for the value tests of tests/algorithms.

A run is built as `fedsim-run` builds it: a config (`tests/helpers.py`'s tiny one), the
algorithm's checked settings, `algorithms.build` from the registry, then a `Simulation`; only the
federation (a toy one), and optionally the latency model or the executor (scripted ones), are
given directly. The helpers record what the aggregator received, so that tests can replay a
paper's server rule by hand on the same updates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedsim_jax import algorithms, experiment
from fedsim_jax.client import client_optimizer
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import Executor, TaskBatchResult, round_up_to_bucket
from fedsim_jax.runtime import Simulation, StopCondition, UpdateBatch
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.strategy.client_loss import ClientLoss
from tests.helpers import make_tiny_config

# Six clients of 8..20 examples: every client holds at least one batch of 8 (the tiny config's).
FED = toy_federation(num_clients=6, min_size=8, max_size=20, seed=1)


def config(algorithm: str, **kwargs: Any) -> ml_collections.ConfigDict:
  """The tiny config of `algorithm` (3 local steps of batch 8, cohorts or slots of 3) for `FED`,
  with `kwargs` as its `algorithm.kwargs`; change other sections on the returned config. Client
  speeds differ (exponentially distributed seconds per step), so that asynchronous updates
  arrive with varied staleness."""
  result = make_tiny_config(algorithm, clients=FED.num_clients)
  result.algorithm.kwargs.update(kwargs)
  result.latency.kwargs.distribution = 'exponential'
  return result


def simulation(
  run_config: ml_collections.ConfigDict,
  federation: FederatedDataset = FED,
  *,
  latency: Any = None,
  executor: Any = None,
  init_params: Any = None,
  backend: str = 'loop',
) -> Simulation:
  """The registered algorithm of `run_config` on `federation`, wired as
  `experiment.build_simulation` wires it (its random streams, SGD clients), with `latency`,
  `executor` and `init_params` replacing the configured latency model, the training executor
  and the model's initial parameters when given. The executor's `backend` defaults to 'loop':
  one program per task, compiled once, whatever the sizes of the batches a run computes."""
  settings = experiment.validate(run_config)
  model = experiment.build_model(run_config, federation)
  streams = experiment.RandomStreams.from_seed(run_config.seed)
  if init_params is None:
    init_params = model.init(streams.init_key)
  if latency is None:
    model_bytes = 4 * model.num_params(init_params)
    latency = experiment.build_latency(run_config, federation, model_bytes, streams.latency_rng)
  context = algorithms.BuildContext(
    run_config.algorithm.name,
    experiment.run_facts(run_config),
    federation.client_sizes,
    latency,
  )
  algorithm = algorithms.build(settings, context)
  if executor is None:
    client = run_config.client
    optimizer = client_optimizer(
      client.optimizer,
      client.learning_rate,
      momentum=client.momentum,
      weight_decay=client.weight_decay,
    )
    update = algorithm.make_client_update(model, optimizer, client.batch_size)
    executor = Executor(update, federation.device_arrays(), streams.train_key, backend=backend)
  return Simulation(
    executor=executor,
    scheduler=algorithm.scheduler,
    aggregator=algorithm.aggregator,
    latency=latency,
    init_params=init_params,
    client_sizes=federation.client_sizes,
    rng=streams.scheduler_rng,
    client_loss=ClientLoss(model, federation),
  )


def run(run_config: ml_collections.ConfigDict, versions: int, **kwargs: Any) -> Simulation:
  """`simulation(run_config, **kwargs)` run to `versions` server versions."""
  sim = simulation(run_config, **kwargs)
  sim.run(StopCondition(max_versions=versions))
  assert sim.version == versions
  return sim


def trajectory(run_config: ml_collections.ConfigDict, versions: int, **kwargs: Any) -> list[Any]:
  """The server model after each of the first `versions` versions of `simulation(run_config)`
  (host copies)."""
  sim = simulation(run_config, **kwargs)
  models: list[Any] = []
  sim.on_version = lambda s: models.append(to_numpy(s.params))
  sim.run(StopCondition(max_versions=versions))
  return models


@dataclasses.dataclass
class Aggregation:
  """One server update of a run: the model before it and the batch the aggregator got (host
  copies; `real` marks the batch's rows that are not padding)."""

  params: Any
  batch: UpdateBatch

  @property
  def real(self) -> np.ndarray:
    return np.asarray(self.batch.weights) > 0


def record_aggregations(sim: Simulation) -> list[Aggregation]:
  """Records every server update `sim` makes from now on (a list that fills as it runs).

  Every round is stacked into the `UpdateBatch` recorded: a round summed as it trains
  (`runtime.summed_aggregation`) builds none; tests/runtime/test_summed_aggregation.py checks
  that summing gives the stacked rounds' models."""
  sim.summed_aggregation = None
  recorded: list[Aggregation] = []
  apply = sim.apply_update_batch

  def recording(batch: UpdateBatch, handles=()):
    recorded.append(Aggregation(to_numpy(sim.params), to_numpy(batch)))
    apply(batch, handles)

  sim.apply_update_batch = recording
  return recorded


def to_numpy(tree: Any) -> Any:
  """`tree` with every array leaf as a float64 (floats) or plain (other) numpy array."""

  def convert(leaf):
    leaf = np.asarray(leaf)
    return leaf.astype(np.float64) if np.issubdtype(leaf.dtype, np.floating) else leaf

  return jax.tree_util.tree_map(convert, tree)


def rows(tree: Any, index: int) -> Any:
  """Row `index` of every leaf of a batched tree."""
  return jax.tree_util.tree_map(lambda leaf: leaf[index], tree)


def plus(params: Any, scale: float, delta: Any) -> Any:
  """params + scale * delta, leaf by leaf."""
  return jax.tree_util.tree_map(lambda p, d: p + scale * d, params, delta)


def weighted_sum(trees: list[Any], weights: Any) -> Any:
  """sum_k weights[k] trees[k], leaf by leaf."""
  return jax.tree_util.tree_map(
    lambda *leaves: sum(w * x for w, x in zip(weights, leaves, strict=True)), *trees
  )


def mix(params: Any, rate: float, other: Any) -> Any:
  """(1 - rate) params + rate other, leaf by leaf."""
  return jax.tree_util.tree_map(lambda p, o: (1 - rate) * p + rate * o, params, other)


def tree_vdot(a: Any, b: Any) -> float:
  return float(sum(np.vdot(x, y) for x, y in zip(leaves(a), leaves(b), strict=True)))


def leaves(tree: Any) -> list[np.ndarray]:
  return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def assert_trees_equal(actual: Any, expected: Any) -> None:
  for x, y in zip(leaves(actual), leaves(expected), strict=True):
    np.testing.assert_array_equal(x, y)


def assert_trees_close(actual: Any, expected: Any, atol: float) -> None:
  for x, y in zip(leaves(actual), leaves(expected), strict=True):
    np.testing.assert_allclose(x, y, atol=atol, rtol=0)


def max_difference(a: Any, b: Any) -> float:
  return max(float(np.abs(x - y).max()) for x, y in zip(leaves(a), leaves(b), strict=True))


class ConstantDeltaExecutor:
  """No training: every task of client i moves the model by `deltas[i]` (a one-coordinate
  model `{'w': [1]}`), whatever its steps; for schedules whose arithmetic is done by hand."""

  def __init__(self, deltas: list[float]):
    self.deltas = deltas

  def run(self, tasks) -> TaskBatchResult:
    size = round_up_to_bucket(len(tasks))
    values = np.zeros((size, 1), np.float32)
    values[: len(tasks), 0] = [self.deltas[task.client_id] for task in tasks]
    steps = np.zeros(size, np.int32)
    steps[: len(tasks)] = [task.num_steps for task in tasks]
    return TaskBatchResult(
      deltas={'w': jnp.asarray(values)},
      aux={'train_loss': jnp.zeros(size), 'steps_run': jnp.asarray(steps)},
      num_tasks=len(tasks),
    )


class StepTimes:
  """A latency model of fixed seconds per local step per client, nothing else."""

  def __init__(self, step_times: list[float]):
    self.step_times = list(step_times)

  def expected_step_time(self, client: int) -> float:
    return self.step_times[client]

  def sample(self, client: int) -> TaskLatency:
    return TaskLatency(communication=0.0, overhead=0.0, per_step=self.step_times[client])
