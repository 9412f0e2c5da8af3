"""PORT (Su and Li 2022): buffers of `buffer_size` asynchronous updates weighted by staleness
(B / (tau + B)) and by similarity to the global progress ((cos + 1) / 2).

PORT (Su and Li, "How Asynchronous can Federated Learning Be?", IWQoS 2022).

Sources: the paper as recalled (its text was not available here: a partially asynchronous
server that aggregates once enough updates have arrived, weighting each by its staleness and by
the divergence of its update from the global model's recent progress) and the authors'
implementation in PLATO (TL-System/plato, `examples/async/port/port_server.py`; AFL-Lib's
`alg/port.py` has the same form), whose weight rule is the one implemented here; a FedASMU
baseline (FedASMU, Sec. 5, baselines; FedASMU states no rule or value for it).

The server buffers arrivals; every `buffer_size` arrivals (PLATO's minimum number of clients
aggregated) it applies w <- w + sum_k p_k Delta_k, with

  raw_k = n_k * ( lambda_sim * (cos(Delta_k, r) + 1) / 2 + lambda_stale * B / (tau_k + B) )
  p_k = raw_k / sum_j raw_j

where n_k is client k's number of examples, tau_k its staleness (server versions since its
download), B the staleness bound and r the reference direction of the global model's progress.
The similarity term rewards updates that agree with where the global model is going (the
"divergence" of the paper), the staleness term B / (tau + B) discounts stale ones.

Choices where the sources are silent or differ (settings: `algorithm.kwargs` of port,
`PortSettings`):
  * Reference direction (`similarity_reference`): 'last_update' is PLATO's (the change made by
    the previous server update, w_t - w_{t-1}); 'since_download' is w_t - w_{o_k}, the global
    progress since the client downloaded w_{o_k} (what PLATO's docstring describes: "the
    difference between the current and a previous model according to client staleness").
  * `similarity_min_staleness` (2): below it the similarity is taken as 1, as PLATO does for
    staleness <= 1. It is also 1 while the reference is zero (before any server update).
  * Weights (`similarity_weight`, `staleness_weight`, `staleness_bound`): PLATO's defaults 1, 1
    and 10.
  * Not modelled: PORT's request that clients staler than the bound upload early (an
    interruption of local training, which the runtime's tasks do not support); staleness beyond
    `algorithm.kwargs.max_staleness` is discarded by the shared asynchronous scheduler instead.
With a buffer of one, p = 1 and PORT is FedAsync with alpha = 1 (the client's model replaces
the global one); with `similarity_weight = 0` and equal staleness it is the example-weighted
average of the buffered deltas.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from optax.tree_utils import tree_vdot

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import ConfigError, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum


class SimilarityReference(StrEnum):
  """The global progress a client's update is compared with (`algorithm.kwargs.similarity_reference`)."""

  LAST_UPDATE = 'last_update'
  SINCE_DOWNLOAD = 'since_download'


SIMILARITY_REFERENCES = tuple(reference.value for reference in SimilarityReference)


@flax.struct.dataclass
class PortState:
  """The global model and the change made by the last server update (w_t - w_{t-1})."""

  params: Params
  last_update: Params


def update_similarity(delta: Params, reference: Params, eps: float = 1e-8) -> jax.Array:
  """cos(delta, reference) over all parameters; 1 when the reference is zero (no progress yet
  to compare with)."""
  ref_norm = jnp.sqrt(tree_vdot(reference, reference))
  cos = tree_vdot(delta, reference) / jnp.maximum(jnp.sqrt(tree_vdot(delta, delta)) * ref_norm, eps)
  return jnp.where(ref_norm > 0, cos, 1.0)


def port_weights(
  num_examples: jax.Array,
  staleness: jax.Array,
  similarity: jax.Array,
  *,
  similarity_weight: float,
  staleness_weight: float,
  staleness_bound: float,
) -> jax.Array:
  """p_k of the buffered updates (`[K]` arrays; rows with `num_examples` 0 get 0):
  n_k (lambda_sim (cos_k + 1) / 2 + lambda_stale B / (tau_k + B)), normalised to sum 1."""
  staleness = staleness.astype(jnp.float32)
  raw = num_examples * (
    similarity_weight * (similarity + 1.0) / 2.0
    + staleness_weight * staleness_bound / (staleness + staleness_bound)
  )
  return raw / jnp.maximum(raw.sum(), 1e-30)


def port_aggregator(
  client_sizes: np.ndarray,
  *,
  similarity_weight: float = 1.0,
  staleness_weight: float = 1.0,
  staleness_bound: float = 10.0,
  similarity_reference: str = 'last_update',
  similarity_min_staleness: int = 2,
) -> Aggregator:
  """PORT's server update over a buffer of updates (see the module docstring).

  Args:
    client_sizes: `[num_clients]` examples per client (n_k).
  """
  if similarity_weight < 0 or staleness_weight < 0 or similarity_weight + staleness_weight <= 0:
    raise ValueError(
      f'algorithm.kwargs.similarity_weight={similarity_weight}, '
      'algorithm.kwargs.staleness_weight='
      f'{staleness_weight}; allowed: both >= 0, not both 0'
    )
  if not staleness_bound > 0:
    raise ValueError(f'algorithm.kwargs.staleness_bound={staleness_bound}; allowed: a number > 0')
  if similarity_reference not in SIMILARITY_REFERENCES:
    raise ValueError(
      f'algorithm.kwargs.similarity_reference={similarity_reference!r}; allowed: '
      f'{SIMILARITY_REFERENCES}'
    )
  if similarity_min_staleness < 0:
    raise ValueError(
      f'algorithm.kwargs.similarity_min_staleness={similarity_min_staleness}; allowed: >= 0'
    )
  sizes = jnp.asarray(client_sizes, jnp.float32)
  since_download = similarity_reference == SimilarityReference.SINCE_DOWNLOAD

  def init(params: Params) -> PortState:
    return PortState(params=params, last_update=jax.tree_util.tree_map(jnp.zeros_like, params))

  def apply(state: PortState, updates: UpdateBatch) -> PortState:
    if updates.client_id is None:
      raise ValueError('port needs UpdateBatch.client_id (the client of every row)')
    if since_download:
      # w_t - w_{o_k}, with the download w_{o_k} = client params - delta.
      references = jax.tree_util.tree_map(
        lambda w, c, d: w[None] - (c - d), state.params, updates.client_params, updates.deltas
      )
      cos = jax.vmap(update_similarity)(updates.deltas, references)
    else:
      cos = jax.vmap(update_similarity, in_axes=(0, None))(updates.deltas, state.last_update)
    cos = jnp.where(updates.staleness >= similarity_min_staleness, cos, 1.0)
    num_examples = sizes[updates.client_id] * updates.mask
    p = port_weights(
      num_examples,
      updates.staleness,
      cos,
      similarity_weight=similarity_weight,
      staleness_weight=staleness_weight,
      staleness_bound=staleness_bound,
    )
    step = jax.tree_util.tree_map(lambda d: jnp.tensordot(p, d, axes=1), updates.deltas)
    return PortState(params=jax.tree_util.tree_map(jnp.add, state.params, step), last_update=step)

  return Aggregator(init=init, apply=apply, needs_client_params=since_download)


@dataclasses.dataclass(frozen=True)
class PortSettings(AsynchronousSettings, LocalWorkSettings, ClientTermsSettings, ServerEmaSettings):
  buffer_size: int = setting(10, positive(integer=True), 'arrivals per server update')
  similarity_weight: float = setting(1.0, positive(allow_zero=True), 'weight of (cos + 1) / 2')
  staleness_weight: float = setting(1.0, positive(allow_zero=True), 'weight of B / (tau + B)')
  staleness_bound: float = setting(10.0, positive(), 'B')
  similarity_reference: str = setting(
    'last_update', one_of(SIMILARITY_REFERENCES), "w_t - w_{t-1} (PLATO) or 'since_download'"
  )
  similarity_min_staleness: int = setting(
    2, positive(integer=True, allow_zero=True), 'below it cos := 1 (PLATO: staleness > 1)'
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.similarity_weight + self.staleness_weight <= 0:
      raise ConfigError(
        f'{prefix}similarity_weight / {prefix}staleness_weight: both are 0; allowed values: '
        'numbers >= 0, not both 0'
      )


@register('port', PortSettings)
def port_algorithm(settings: PortSettings, context: BuildContext) -> Algorithm:
  aggregator = port_aggregator(
    context.client_sizes,
    similarity_weight=settings.similarity_weight,
    staleness_weight=settings.staleness_weight,
    staleness_bound=settings.staleness_bound,
    similarity_reference=settings.similarity_reference,
    similarity_min_staleness=settings.similarity_min_staleness,
  )
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )
