"""FedSA (Chen, Mao and Ma 2021): buffers of M = `buffer_size` asynchronous updates, each
weighted by its examples and s(staleness); tau_0 is `max_staleness`.

FedSA (Chen, Mao and Ma, "FedSA: A staleness-aware asynchronous Federated Learning algorithm
with non-IID data", Future Generation Computer Systems 120, 2021).

Sources: the paper's semi-asynchronous protocol (the server aggregates once M local updates have
arrived, M being FedSA's central parameter, and bounds staleness by a threshold tau_0) and the
way FedASMU, whose baseline this is, characterises its aggregation: "a staleness-based
polynomial formula ... to assign high weights to fresh models" (FedASMU, Sec. 5,
baselines; FedASMU states no formula or value). The paper's full text was not available here;
the rule below is that characterisation, stated precisely:

  w <- w + sum_{k in buffer} (n_k / sum_{j in buffer} n_j) s(tau_k) Delta_k,
  s(tau) = (tau + 1)^-a            (`algorithm.kwargs.staleness`, `algorithm.kwargs.staleness_a`)

over each buffer of M = `algorithm.kwargs.buffer_size` arrivals, with n_k the client's examples
and tau_k its staleness (server versions since its download). Updates staler than tau_0 =
`algorithm.kwargs.max_staleness` are discarded by the shared asynchronous scheduler (FedSA
forces such clients to resynchronise; the runtime cannot interrupt a task, so their upload is
dropped).

Choices where the sources are silent (named settings): the staleness function and exponent are
the shared `algorithm.kwargs.staleness` / `algorithm.kwargs.staleness_a` (default polynomial,
a = 0.5, FedAsync's); the average is over the buffer's examples (`client_sizes`), independent of
`algorithm.kwargs.weighting`; the server step is 1. Not implemented: the paper's per-client learning
rates (its non-IID adjustment from clients' participation frequencies), whose exact form could
not be recovered from the available sources.
With M = 1 FedSA is FedAsync's delta form with alpha = 1 and the same s; with s constant it is
the example-weighted average of the buffered deltas.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  StalenessSettings,
)
from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import positive, setting
from fedsim_jax.strategy.staleness import StalenessFn


@flax.struct.dataclass
class FedSAState:
  params: Params


def fedsa_weights(
  num_examples: jax.Array, staleness: jax.Array, staleness_fn: StalenessFn
) -> jax.Array:
  """n_k / sum_j n_j * s(tau_k) of the buffered updates (`[K]`; rows with 0 examples get 0)."""
  return num_examples / jnp.maximum(num_examples.sum(), 1e-30) * staleness_fn(staleness)


def fedsa_aggregator(client_sizes: np.ndarray, staleness_fn: StalenessFn) -> Aggregator:
  """FedSA's server update over a buffer of M updates (see the module docstring).

  Args:
    client_sizes: `[num_clients]` examples per client (n_k).
    staleness_fn: s(tau).
  """
  sizes = jnp.asarray(client_sizes, jnp.float32)

  def apply(state: FedSAState, updates: UpdateBatch) -> FedSAState:
    if updates.client_id is None:
      raise ValueError('fedsa needs UpdateBatch.client_id (the client of every row)')
    p = fedsa_weights(sizes[updates.client_id] * updates.mask, updates.staleness, staleness_fn)
    step = jax.tree_util.tree_map(lambda d: jnp.tensordot(p, d, axes=1), updates.deltas)
    return FedSAState(params=jax.tree_util.tree_map(jnp.add, state.params, step))

  return Aggregator(init=FedSAState, apply=apply)


@dataclasses.dataclass(frozen=True)
class FedSASettings(
  AsynchronousSettings,
  LocalWorkSettings,
  StalenessSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  buffer_size: int = setting(10, positive(integer=True), 'M: arrivals per server update')


@register('fedsa', FedSASettings)
def fedsa_algorithm(settings: FedSASettings, context: BuildContext) -> Algorithm:
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(
      fedsa_aggregator(context.client_sizes, settings.staleness_function())
    ),
    make_client_update=settings.make_client_update(),
  )
