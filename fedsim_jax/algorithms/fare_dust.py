"""FARe-DUST (Hard et al., "Learning from straggler clients", Sec. 2.2, Algorithms 1 and 3).

Synchronous rounds with over-selection: the server applies FedAdam (`server_optimizer`)
to the fastest B of B_t; late stragglers are summed into a ring of the last k rounds' deltas;
each client distils (strength rho) from a historical teacher w_t - eta_g Delta_t' / b_t' drawn
from that ring; an EMA of the server weights is evaluated.

Defaults: the EMNIST values of Tables 16 and 17 (k 50, rho 0.1, beta 0.99) on FedAdam with App.
G.1's EMNIST values (G.3: "Default values for FedAdam from Appendix G.1 were used"; Table 11:
eta_g 0.003, beta_1 0.9, beta_2 0.99, epsilon 1e-4; its client learning rate 0.03 is
`client.learning_rate`, not an algorithm setting), and Algorithm 1's unweighted sums
(`weighting='uniform'`). The teacher's eta_g (`teacher_learning_rate`) defaults to
`server_learning_rate`, as Algorithm 1 line 7 uses the same eta_g as line 15. The evaluated
model is Algorithm 1's output EMA_beta(w_1, ..., w_T), which leaves the initial model w_0 out:
`ema_warmup='bias_correction'` (the default) is the beta-weighted mean of w_1..w_t with weights
summing to one; 'none' starts the EMA at w_0 instead (after 100 rounds at beta 0.99, 37% of the
evaluated model is then w_0) and 'num_updates' follows TensorFlow's warm-up schedule.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  CohortSettings,
  HeldModels,
  LocalWorkSettings,
  ServerOptimizerSettings,
  ema_warmup_setting,
)
from fedsim_jax.client import local_update
from fedsim_jax.settings import decay, one_of, positive, setting
from fedsim_jax.strategy.ema import with_ema
from fedsim_jax.strategy.fare_dust import (
  EMPTY_HISTORY_RULES,
  FareDustScheduler,
  fare_dust_objective,
)
from fedsim_jax.strategy.fedopt import server_update
from fedsim_jax.strategy.server_optimizers import SERVER_OPTIMIZERS
from fedsim_jax.strategy.synchronous import WEIGHTINGS


@dataclasses.dataclass(frozen=True)
class FareDustSettings(CohortSettings, LocalWorkSettings, ServerOptimizerSettings):
  weighting: str = setting(
    'uniform', one_of(WEIGHTINGS), 'update weights (Alg. 1 sums the deltas unweighted)'
  )
  server_learning_rate: float = setting(
    0.003, positive(), 'eta_g of FedAdam and (by default) the teacher (Table 11, EMNIST)'
  )
  eps: float = setting(
    1e-4, positive(), "FedAdam's epsilon, tau of Reddi et al. (Table 11, EMNIST)"
  )
  history_length: int = setting(50, positive(integer=True), 'k: rounds of summed deltas kept')
  rho: float = setting(0.1, positive(allow_zero=True), 'distillation strength')
  temperature: float = setting(1.0, positive(), 'T of the distillation loss (not stated)')
  ema_decay: float = setting(0.99, decay(), 'beta of the evaluated EMA')
  # Algorithm 1's output EMA_beta(w_1, ..., w_T) leaves w_0 out: the beta-weighted mean of the
  # server models after each update; 'none' (an EMA started at w_0) is the other reading.
  ema_warmup: str = ema_warmup_setting('bias_correction')
  teacher_learning_rate: float | None = setting(
    None,
    positive(optional=True),
    'eta_g of Alg. 1 line 7 (w_teacher = w_t - eta_g Delta_t / b_t); None: server_learning_rate',
  )
  empty_history: str = setting(
    'no_distillation', one_of(EMPTY_HISTORY_RULES), "before any delta is kept; or 'latest_model'"
  )
  server_optimizer: str = setting(
    'adam', one_of(SERVER_OPTIMIZERS), '"in conjunction with the FedAdam server optimizer" (G.3)'
  )
  proximal_strength: float = setting(0.0, positive(allow_zero=True), '`+ L2 reg.` nu')

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('algorithm.kwargs.history_length', self.history_length, 'summed deltas')]


@register('fare_dust', FareDustSettings)
def fare_dust_algorithm(settings: FareDustSettings, context: BuildContext) -> Algorithm:
  teacher_learning_rate = (
    settings.server_learning_rate
    if settings.teacher_learning_rate is None
    else settings.teacher_learning_rate
  )
  scheduler = FareDustScheduler(
    settings.cohort_size,
    settings.local_work(context),
    settings.weighting,
    num_selected=settings.num_selected,
    history_length=settings.history_length,
    teacher_learning_rate=teacher_learning_rate,
    distill=settings.rho > 0,
    empty_history=settings.empty_history,
    rng=np.random.default_rng([context.seed, 0xFA2ED5]),  # its own stream, from the run seed
  )
  aggregator = server_update(settings.make_server_optimizer(settings.server_optimizer))
  if settings.ema_decay > 0:
    aggregator = with_ema(aggregator, settings.ema_decay, settings.ema_warmup)
  return Algorithm(
    scheduler=scheduler,
    aggregator=aggregator,
    make_client_update=functools.partial(
      local_update,
      objective=fare_dust_objective(settings.rho, settings.temperature, settings.proximal_strength),
    ),
  )
