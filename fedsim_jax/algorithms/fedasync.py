"""FedAsync (Xie et al. 2019): one update at a time, mixed into the server model with rate
alpha * s(staleness): w <- (1 - a) w + a w_client (`form='mixing'`), or the client's delta
applied with its weight (`form='delta'`, the form of FedCompass's FedAsync baseline).

Xie et al.'s optional regularised local objective, f(x) + (rho / 2) ||x - x_downloaded||^2, is
`algorithm.kwargs.proximal_strength` = rho (0, the default, trains f alone)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  StalenessSettings,
)
from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.settings import number, one_of, setting
from fedsim_jax.strategy.fedasync import fedasync, fedasync_delta
from fedsim_jax.strategy.staleness import StalenessFn

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
