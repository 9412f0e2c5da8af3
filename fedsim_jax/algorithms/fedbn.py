"""FedBN (Li, Jiang, Zhang, Kamp, Dou 2021, "FedBN: Federated Learning on Non-IID Features via
Local Batch Normalization", Algorithm 1): FedAvg in which every client keeps its BatchNorm
layers (their scale and bias and their running statistics) local; the server averages the
other parameters only.

How it is computed here:
* The local leaves are those of BatchNorm layers: under a `BatchNorm*` module, or in the
  `batch_stats` collection (`local_leaves`). Each client's local leaves live in a client table
  of the scheduler (`FedBNScheduler.local_parts`), starting at the initial model's.
* A task starts from the downloaded global model with the client's own local leaves put in at
  its first local step (`LocalNormStep`, a step prelude), so the client trains the global
  non-BN weights with its own normalisation. When its update is aggregated, the scheduler
  stores its new local leaves (the round's model plus its delta).
* The server applies FedAvg's weighted mean to every leaf. For the non-BN leaves this is FedBN's
  aggregation; the global model's BN leaves become the mean of the participating clients' own,
  which clients never download: they serve only the central test set's evaluation, an
  evaluation the paper does not make (it tests each client with its own BN layers, which
  per-client evaluation reports as `personal_model_accuracy_*`).
* The model must have BatchNorm (`model.name='fedbn_cnn'`, the paper's digits CNN, or a model
  with `norm='batch'`); the local leaves are a small part of the model, left out of the memory
  estimate.

Limit (tests/algorithms/test_fedbn_values.py): with a single client, or while every client's
BN leaves equal the global ones, FedBN's first round is FedAvg's.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
  synchronous_scheduler,
)
from fedsim_jax.client.local_update import local_update
from fedsim_jax.client.objective import cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.models.zoo import Norm
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.settings import ConfigError
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import AroundRounds, ClosingRound
from fedsim_jax.tree import row


def _is_local(path: tuple[Any, ...]) -> bool:
  keys = [str(getattr(entry, 'key', entry)) for entry in path]
  return 'batch_stats' in keys or any(key.startswith('BatchNorm') for key in keys)


def local_leaves(params: Params) -> list[bool]:
  """For each leaf of `params` (in `tree_leaves` order), whether it is a BatchNorm leaf."""
  return [_is_local(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def local_part(params: Params) -> tuple[jax.Array, ...]:
  """The BatchNorm leaves of `params`, in order."""
  mask = local_leaves(params)
  return tuple(leaf for leaf, local in zip(jax.tree_util.tree_leaves(params), mask) if local)


def with_local_part(params: Params, part: tuple[jax.Array, ...]) -> Params:
  """`params` with its BatchNorm leaves replaced by `part` (as `local_part` orders them)."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  replacements = iter(part)
  merged = [
    next(replacements) if local else leaf for leaf, local in zip(leaves, local_leaves(params))
  ]
  return jax.tree_util.tree_unflatten(treedef, merged)


class LocalNormInputs(NamedTuple):
  """A FedBN task's `task_inputs`: the client's own BatchNorm leaves."""

  local: tuple[jax.Array, ...]


@dataclasses.dataclass(frozen=True)
class LocalNormStep:
  """Puts the client's own BatchNorm leaves into the downloaded model at the first step."""

  def init(self, model: Model, start_params: Params, task_inputs: Any) -> None:
    return None

  def __call__(
    self,
    model: Model,
    params: Params,
    batch: Any,
    task_inputs: LocalNormInputs,
    state: None,
    steps_run: jax.Array,
  ) -> tuple[Params, None]:
    own = with_local_part(params, task_inputs.local)
    first = steps_run == 0
    return jax.tree_util.tree_map(lambda o, p: jnp.where(first, o, p), own, params), state

  def aux(self, state: None) -> dict[str, Any]:
    return {}


_local_after = jax.jit(
  lambda params, delta: local_part(jax.tree_util.tree_map(jnp.add, params, delta))
)


class FedBNScheduler(AroundRounds):
  """FedAvg's synchronous rounds, plus each client's BatchNorm leaves (module docstring).

  Attributes:
    local_parts: every client's BatchNorm leaves, a `ClientTable` (None before the run starts).
  """

  def __init__(self, settings: DeadlineSettings, context: BuildContext):
    self.local_parts: client_table.ClientTable | None = None
    self.rounds = synchronous_scheduler(
      settings, context, task_inputs=self._task_inputs, round_closing=self._round_closing
    )

  def start(self, sim: SchedulerContext) -> None:
    self.local_parts = client_table.broadcast(local_part(sim.params), sim.num_clients)
    super().start(sim)

  def _task_inputs(self, sim: SchedulerContext, client: int) -> LocalNormInputs:
    assert self.local_parts is not None
    return LocalNormInputs(client_table.read(self.local_parts, client))

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    assert self.local_parts is not None
    batch = sim.updates(closing.aggregated, closing.weights)
    for index, handle in enumerate(closing.aggregated):
      local = _local_after(sim.params, row(batch.deltas, index))
      self.local_parts = client_table.write(self.local_parts, handle.client_id, local)

  def personal_models_of(self, params: Params, clients: np.ndarray) -> Params:
    """The global model with each of `clients`' own BatchNorm leaves, stacked."""
    count = len(clients)
    stacked = jax.tree_util.tree_map(
      lambda leaf: jnp.broadcast_to(leaf, (count, *leaf.shape)), params
    )
    if self.local_parts is None:  # before the first round every client holds the initial BN
      return stacked
    rows = jnp.asarray(clients)
    own = tuple(column[rows] for column in self.local_parts.values)
    return with_local_part(stacked, own)


@dataclasses.dataclass(frozen=True)
class FedBNSettings(
  DeadlineSettings, LocalWorkSettings, ServerOptimizerSettings, ServerEmaSettings
):
  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.model_norm != Norm.BATCH:
      raise ConfigError(
        f"algorithm.name='fedbn' needs a model with BatchNorm (model norm: {run.model_norm!r}); "
        "allowed: model.name='fedbn_cnn', or a model with model.kwargs.norm='batch'"
      )


@register('fedbn', FedBNSettings)
def fedbn_algorithm(settings: FedBNSettings, context: BuildContext) -> Algorithm:
  scheduler = FedBNScheduler(settings, context)
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(settings.make_server_optimizer('sgd'))),
    make_client_update=functools.partial(
      local_update, objective=(cross_entropy(),), prelude=LocalNormStep()
    ),
  )
