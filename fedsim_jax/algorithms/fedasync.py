"""FedAsync (Xie et al. 2019): one update at a time, mixed into the server model with rate
alpha * s(staleness): w <- (1 - a) w + a w_client (`form='mixing'`), or the client's delta
applied with its weight (`form='delta'`, the form of FedCompass's FedAsync baseline).

Xie et al.'s optional regularised local objective, f(x) + (rho / 2) ||x - x_downloaded||^2, is
`algorithm.kwargs.proximal_strength` = rho (0, the default, trains f alone).

FedAsync (Xie et al. 2019, "Asynchronous Federated Optimization", Algorithm 1).

On each arrival: w <- (1 - a_t) w + a_t w_client with a_t = alpha * s(t - tau), where tau is the
version the client downloaded and s a staleness function (`fedasync`). Several updates in one
batch are mixed in one at a time, in order. `fedasync_delta` is the delta form of FedCompass's
FedAsync baseline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.struct
import jax
import optax

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
from fedsim_jax.settings import number, one_of, setting
from fedsim_jax.strategy.reducers import staleness_scaled, weighted_sum
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.staleness import StalenessFn, scaled


@flax.struct.dataclass
class MixingState:
  params: Params


def _check_alpha(alpha: float) -> None:
  if not 0 < alpha <= 1:
    raise ValueError(f'algorithm.kwargs.alpha={alpha}; allowed: 0 < alpha <= 1')


def fedasync(alpha: float, staleness: StalenessFn) -> Aggregator:
  """Xie et al.'s rule w <- (1 - a) w + a w_client as an aggregator (reads
  `updates.client_params`)."""
  _check_alpha(alpha)

  def apply(state: MixingState, updates: UpdateBatch) -> MixingState:
    rates = alpha * staleness(updates.staleness) * (updates.weights > 0)

    def mix(params, row):
      rate, client = row
      return jax.tree_util.tree_map(lambda w, c: (1 - rate) * w + rate * c, params, client), None

    params, _ = jax.lax.scan(mix, state.params, (rates, updates.client_params))
    return MixingState(params=params)

  return Aggregator(init=MixingState, apply=apply, needs_client_params=True)


def fedasync_delta(alpha: float, staleness: StalenessFn) -> Aggregator:
  """The form FedCompass's FedAsync baseline uses (APPFL): w <- w + a p_i delta_i, the client's
  delta applied to the current model with its weight p_i. It equals FedCompass with Q_min =
  Q_max when every client forms its own arrival group."""
  _check_alpha(alpha)
  return server_update(optax.sgd(1.0), staleness_scaled(weighted_sum(), scaled(alpha, staleness)))


# The `form` setting: Xie et al.'s mixing rule, or the delta form of FedCompass's baseline.
FORMS: dict[str, Callable[[float, StalenessFn], Aggregator]] = {
  'mixing': fedasync,
  'delta': fedasync_delta,
}


@dataclasses.dataclass(frozen=True)
class FedAsyncSettings(
  AsynchronousSettings,
  LocalWorkSettings,
  StalenessSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  alpha: float = setting(0.9, number(above=0, maximum=1), 'alpha of a = alpha s(staleness)')
  form: str = setting('mixing', one_of(FORMS), "or 'delta' (FedCompass's baseline)")


@register('fedasync', FedAsyncSettings)
def fedasync_algorithm(settings: FedAsyncSettings, context: BuildContext) -> Algorithm:
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, 1),
    aggregator=settings.with_ema(
      FORMS[settings.form](settings.alpha, settings.staleness_function())
    ),
    make_client_update=settings.make_client_update(),
  )
