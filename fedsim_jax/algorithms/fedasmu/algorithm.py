"""FedASMU's registered factory: one per variant (`VARIANTS`), each building the scheduler,
the server's aggregator and the devices' client update from `FedasmuSettings`."""

from __future__ import annotations

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.fedasmu.device import fresh_model_blend
from fedsim_jax.algorithms.fedasmu.scheduler import FedasmuScheduler
from fedsim_jax.algorithms.fedasmu.server import fedasmu_aggregator
from fedsim_jax.algorithms.fedasmu.settings import VARIANTS, FedasmuSettings


def fedasmu_algorithm(settings: FedasmuSettings, context: BuildContext) -> Algorithm:
  policy = settings.make_fetch_policy(context.name, context.num_clients, context.seed)
  assert settings.trigger_period is not None  # check_run: Alg. 1 triggers periodically
  scheduler = FedasmuScheduler(
    settings.trigger_period,
    settings.trigger_count,
    settings.concurrency,
    settings.local_work(context),
    tau=settings.tau,
    fetch_policy=policy,
    gamma_0=settings.gamma_0,
    v_0=settings.v_0,
    timing=settings.trigger_timing,
  )
  # With a fetch the objective is Formula 4's cross-entropy alone (check_run) and segments
  # start with the blend of Formulas 7-9.
  blend = None
  if policy is not None:
    blend = fresh_model_blend(
      settings.mu_beta, settings.gamma_learning_rate, settings.v_learning_rate
    )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(
      fedasmu_aggregator(
        context.num_clients,
        settings,
        dynamic=settings.dynamic_of(context.name),
        client_learning_rate=context.run.client_learning_rate,
      )
    ),
    make_client_update=settings.make_client_update(prelude=blend),
  )


for _name in VARIANTS:
  register(_name, FedasmuSettings)(fedasmu_algorithm)
