"""FeAST-on-MSG (Hard et al., "Learning from straggler clients", Sec. 2.3, Algorithm 2).

FedAvg (server learning rate eta_g) on the fastest B of B_t; stragglers that arrive within
tau_max of their round update the evaluated auxiliary model a (Equations 1-2). Defaults: the
EMNIST `per-example` values of Table 18 (eta_g 0.006, beta 0.95, kappa 0; Table 19,
`per-domain`: eta_g 0.006, beta 0.99, kappa 0.9), App. G.4's tau_max of 100,000 s, and
Algorithm 2's unweighted sums (`weighting='uniform'`). eta_g is Algorithm 2's, the same rule
as the code's (w_{t+1} = w_t - (eta_g / b_t) Delta_t, with the code's sign of the delta), so
Table 18's tuned value applies as it is, though it is far below FedAvg's 1 (Table 10).
"""

from __future__ import annotations

import dataclasses

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import ClientTermsSettings, CohortSettings, LocalWorkSettings
from fedsim_jax.settings import decay, number, one_of, positive, setting
from fedsim_jax.strategy.feast_msg import (
  WINDOW_CLOSE_RULES,
  FeastScheduler,
  auxiliary_update,
  feast_aggregator,
)
from fedsim_jax.strategy.synchronous import WEIGHTINGS


@dataclasses.dataclass(frozen=True)
class FeastSettings(CohortSettings, LocalWorkSettings, ClientTermsSettings):
  weighting: str = setting(
    'uniform', one_of(WEIGHTINGS), 'update weights (Alg. 2 sums the deltas unweighted)'
  )
  server_learning_rate: float = setting(
    0.006, positive(), 'eta_g (Table 18, EMNIST / CIFAR-100 / StackOverflow: 0.006/0.2/0.01)'
  )
  tau_max: float = setting(
    100000.0, number(minimum=0), "seconds a round's stragglers may join (App. G.4)"
  )
  ema_decay: float = setting(0.95, decay(), 'beta of a, Eq. (2)')
  kappa: float = setting(0.0, positive(allow_zero=True), 'eta_a / eta_g')
  window_close: str = setting(
    'complete', one_of(WINDOW_CLOSE_RULES), "at tau_max or once all stragglers are in; or 'tau_max'"
  )


@register('feast_msg', FeastSettings)
def feast_msg_algorithm(settings: FeastSettings, context: BuildContext) -> Algorithm:
  learning_rate = settings.server_learning_rate
  scheduler = FeastScheduler(
    settings.cohort_size,
    settings.local_work(context),
    settings.weighting,
    num_selected=settings.num_selected,
    tau_max=settings.tau_max,
    update_auxiliary=auxiliary_update(learning_rate, settings.kappa, settings.ema_decay),
    window_close=settings.window_close,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=feast_aggregator(learning_rate),
    make_client_update=settings.make_client_update(),
  )
