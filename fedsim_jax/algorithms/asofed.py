"""ASO-Fed (Chen et al. 2020, Algorithms 1-2): one update at a time, w <- w + (n_k / n) Delta_k;
clients train with a decayed gradient average, a local constraint (lambda / 2)||w - w^t||^2 and
a delay-dependent step size r_k."""

from __future__ import annotations

import dataclasses
import functools

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.client import cross_entropy, local_update, proximal
from fedsim_jax.settings import boolean, decay, one_of, positive, setting
from fedsim_jax.strategy.asofed import (
  DECAY_GRADIENTS,
  DELAY_MEASURES,
  AsoFedClients,
  asofed_aggregator,
  asofed_correction,
)


@dataclasses.dataclass(frozen=True)
class AsoFedSettings(AsynchronousSettings, LocalWorkSettings, ServerEmaSettings):
  proximal: float = setting(0.01, positive(allow_zero=True), 'lambda, the local constraint')
  decay: float = setting(0.5, decay(), 'beta, decay of the gradient average h')
  decay_gradient: str = setting('current', one_of(DECAY_GRADIENTS), 'gradient entering h')
  dynamic_step_size: bool = setting(
    True, boolean, 'r_k = max(1, log(mean delay / delay_unit)); else 1'
  )
  delay_measure: str = setting(
    'training_time', one_of(DELAY_MEASURES), "delay in virtual seconds, or 'staleness'"
  )
  delay_unit: float = setting(
    1.0,
    positive(),
    "virtual seconds that make one unit of delay inside r_k's log (training_time; 1 = seconds)",
  )

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('data.num_clients', 2 * num_clients, "each client's h and last gradient")]


@register('asofed', AsoFedSettings)
def asofed_algorithm(settings: AsoFedSettings, context: BuildContext) -> Algorithm:
  clients = AsoFedClients(
    dynamic_step_size=settings.dynamic_step_size,
    delay_measure=settings.delay_measure,
    delay_unit=settings.delay_unit,
  )
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, 1, client_state=clients),
    aggregator=settings.with_ema(asofed_aggregator(context.client_sizes)),
    make_client_update=functools.partial(
      local_update,
      objective=(
        cross_entropy(),
        proximal(settings.proximal),  # the local constraint lambda
        asofed_correction(settings.decay, settings.decay_gradient),
      ),
    ),
  )
