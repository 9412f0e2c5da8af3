"""Named algorithms: each is a client update + a scheduler + an aggregator built from a config.

Register a new algorithm by adding a builder `(config, context) -> Algorithm` to `ALGORITHMS`.
Settings shared by every algorithm are applied here once: the client objective's regularisers
(`client.proximal_strength`, `client.distillation_strength`) and the evaluated EMA of the server
weights (`server.ema_decay`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import ml_collections
import numpy as np
import optax

from fedsim_jax.client import ClientUpdate, sgd_client_update
from fedsim_jax.models import Model
from fedsim_jax.runtime.latency import LatencyModel
from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.strategy import budgets
from fedsim_jax.strategy.asofed import AsoFedClients, asofed_aggregator, asofed_client_update
from fedsim_jax.strategy.asynchronous import AsynchronousScheduler
from fedsim_jax.strategy.ccfedavg import BudgetedScheduler, ccfedavg_server_aggregator
from fedsim_jax.strategy.ema import with_ema
from fedsim_jax.strategy.fare_dust import FareDustScheduler, fare_dust_client_update
from fedsim_jax.strategy.feast_msg import FeastScheduler, auxiliary_update, feast_aggregator
from fedsim_jax.strategy.fedasmu import FEDASMU_VARIANTS, build_fedasmu
from fedsim_jax.strategy.fedasync import fedasync
from fedsim_jax.strategy.fedat import TieredScheduler, fedat_aggregator, speed_tiers
from fedsim_jax.strategy.fedcompass import CompassScheduler, compass_aggregator
from fedsim_jax.strategy.feddyn import FedDynScheduler, feddyn_aggregator, feddyn_client_update
from fedsim_jax.strategy.fedopt import fedopt
from fedsim_jax.strategy.fedsa import fedsa_aggregator
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.moon import MoonScheduler, moon_client_update
from fedsim_jax.strategy.periodic_trigger import PeriodicTriggerScheduler
from fedsim_jax.strategy.port import port_aggregator
from fedsim_jax.strategy.server_optimizers import server_optimizer
from fedsim_jax.strategy.staleness import make_staleness
from fedsim_jax.strategy.synchronous import SynchronousScheduler


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What builders may need to know about the federation."""

  num_clients: int
  client_sizes: np.ndarray
  latency: LatencyModel


class Algorithm(NamedTuple):
  """A runnable algorithm: `make_client_update(model, optimizer, batch_size)`, a scheduler
  object (`runtime.Scheduler`) and an aggregator."""

  name: str
  scheduler: Any
  aggregator: Aggregator
  make_client_update: Callable = sgd_client_update


BUDGET_RULES = ('beta', 'two_group', 'uniform')


def local_work_from_config(config: ml_collections.ConfigDict) -> LocalWork:
  return LocalWork(
    steps=config.client.get('local_steps'),
    epochs=config.client.get('local_epochs'),
    batch_size=config.client.batch_size,
    time_limit=config.scheduler.get('time_limit'),
    limit_includes_overhead=config.scheduler.get('limit_includes_overhead', True),
  )


def _server_optimizer(config: ml_collections.ConfigDict, name: str):
  server = config.server
  return server_optimizer(
    name,
    server.learning_rate,
    momentum=server.momentum,
    b1=server.b1,
    b2=server.b2,
    eps=server.eps,
    adaptive_form=server.adaptive_form,
  )


def _staleness(config: ml_collections.ConfigDict):
  return make_staleness(
    config.server.staleness, a=config.server.staleness_a, b=config.server.staleness_b
  )


def _synchronous(
  config: ml_collections.ConfigDict, context: BuildContext, optimizer_name: str
) -> Algorithm:
  """FedAvg / FedAvgM / FedAdam / FedYogi / FedAdagrad: synchronous rounds (optionally with
  over-selection, a deadline or time-limited clients) + the FedOpt server update."""
  del context
  s = config.scheduler
  scheduler = SynchronousScheduler(
    s.cohort_size,
    local_work_from_config(config),
    s.weighting,
    num_selected=s.num_selected,
    deadline=s.deadline,
    min_responses=s.min_responses,
  )
  return Algorithm(config.algorithm, scheduler, fedopt(_server_optimizer(config, optimizer_name)))


def asynchronous_scheduler(config: ml_collections.ConfigDict, buffer_size: int):
  """The scheduler every asynchronous algorithm shares: `buffer_size` arrivals per server
  update, at most `scheduler.concurrency` tasks in flight, arrivals staler than
  `scheduler.max_staleness` discarded. Slots are refilled at once, or, with
  `scheduler.trigger_period` set, by FedASMU's periodic trigger (strategy/periodic_trigger.py)."""
  s = config.scheduler
  if s.get('trigger_period') is not None:
    return PeriodicTriggerScheduler(
      s.trigger_period,
      s.trigger_count,
      s.concurrency,
      buffer_size,
      local_work_from_config(config),
      s.weighting,
      s.max_staleness,
      s.trigger_timing,
    )
  return AsynchronousScheduler(
    s.concurrency, buffer_size, local_work_from_config(config), s.weighting, s.max_staleness
  )


def _fedasync(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedAsync: one update at a time, mixed in with rate alpha * s(staleness)."""
  del context
  scheduler = asynchronous_scheduler(config, 1)
  return Algorithm(
    'fedasync',
    scheduler,
    fedasync(config.server.alpha, _staleness(config), config.server.fedasync_form),
  )


def _fedbuff(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedBuff: buffers of K asynchronous updates, averaged over K (optionally staleness-scaled),
  applied by the server optimizer."""
  del context
  scheduler = asynchronous_scheduler(config, config.scheduler.buffer_size)
  staleness = None if config.server.staleness == 'constant' else _staleness(config)
  aggregator = fedopt(
    _server_optimizer(config, config.server.optimizer),
    normalization=config.server.normalization,
    staleness=staleness,
  )
  return Algorithm('fedbuff', scheduler, aggregator)


def _fedat(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedAT: speed tiers, synchronous inside, asynchronous across with FedAT's tier weights."""
  step_times = np.array([context.latency.expected_step_time(c) for c in range(context.num_clients)])
  tiers = speed_tiers(step_times, config.scheduler.tier_ratio)
  scheduler = TieredScheduler(tiers, config.scheduler.cohort_size, local_work_from_config(config))
  return Algorithm('fedat', scheduler, fedat_aggregator(len(tiers)))


def _fedcompass(
  config: ml_collections.ConfigDict, context: BuildContext, variant: str
) -> Algorithm:
  """FedCompass (+M, +N): the Compass scheduler + the buffered, staleness-scaled update."""
  del context
  s = config.scheduler
  if config.client.get('local_steps') is not None or config.client.get('local_epochs') is not None:
    raise ValueError(
      'client.local_steps / client.local_epochs: FedCompass sets local steps '
      'itself (scheduler.q_min..q_max); set both to None'
    )
  scheduler = CompassScheduler(
    s.q_min,
    s.q_max,
    s.latest_time_factor,
    s.weighting,
    s.speed_estimator,
    s.speed_momentum,
    s.create_rule,
  )
  aggregator = compass_aggregator(
    config.server.alpha, config.server.staleness_a, variant, config.server.momentum
  )
  return Algorithm(config.algorithm, scheduler, aggregator)


def client_budgets(config: ml_collections.ConfigDict, num_clients: int) -> np.ndarray:
  """p_i of every client from `config.budget` (CC-FedAvg, Sec. III-B and VI)."""
  b = config.budget
  rng = np.random.default_rng([config.seed, 0xB0D6E7])  # its own stream, from the run seed
  if b.rule == 'beta':
    return budgets.beta_levels(num_clients, b.beta, rng if b.random_assignment else None)
  if b.rule == 'two_group':
    return budgets.two_group_budgets(num_clients, b.r, b.w, rng if b.random_assignment else None)
  if b.rule == 'uniform':
    return budgets.uniform_budgets(num_clients, b.w)
  raise ValueError(f'budget.rule={b.rule!r}; allowed: {BUDGET_RULES}')


def _budgeted(
  config: ml_collections.ConfigDict, context: BuildContext, estimator: str
) -> Algorithm:
  """CC-FedAvg and the skipping strategies it is compared with: synchronous rounds in which
  each selected client trains or skips by `budget.schedule`."""
  b = config.budget
  p = client_budgets(config, context.num_clients)
  rng = np.random.default_rng([config.seed, 0x5C4ED])
  if estimator == 'dropout':  # FedAvg (dropout): train until the quota p_i T is used up
    schedule = budgets.QuotaSchedule(p, config.run.num_rounds)
    estimator = 'ignore'
  else:
    settings = {'first_selection_trains': b.first_selection_trains}
    if b.schedule == 'round_robin':
      settings['phase'] = b.phase
    schedule = budgets.make_schedule(b.schedule, p, rng, **settings)
  scheduler = BudgetedScheduler(
    config.scheduler.cohort_size,
    local_work_from_config(config),
    schedule,
    estimator=estimator,
    switch_round=config.scheduler.switch_round,
    storage=config.scheduler.storage,
  )
  aggregator = (
    ccfedavg_server_aggregator(context.num_clients)
    if config.scheduler.storage == 'server'
    else fedopt(optax.sgd(1.0))
  )
  return Algorithm(config.algorithm, scheduler, aggregator)


class _EverySelected:
  """FedNova's schedule: every selected client trains (with fewer steps)."""

  def trains(self, client: int, round_index: int, has_trained_before: bool) -> bool:
    del client, round_index, has_trained_before
    return True


def _fednova_budgeted(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedNova as CC-FedAvg's 'reduce local iterations' baseline (Sec. VI-D): every selected
  client trains floor(p_i K) >= 1 steps and the server averages FedNova-style (normalized by
  each client's steps, times the mean step count)."""
  p = client_budgets(config, context.num_clients)
  steps = config.client.local_steps
  if steps is None:
    raise ValueError('fednova_budget needs client.local_steps (K)')
  per_client = np.maximum(1, np.floor(p * steps)).astype(np.int64)
  scheduler = BudgetedScheduler(
    config.scheduler.cohort_size,
    local_work_from_config(config),
    _EverySelected(),
    steps_per_client=per_client,
  )
  return Algorithm('fednova_budget', scheduler, fedopt(optax.sgd(1.0), normalization='steps'))


def _fare_dust_client(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  rho: float,
  temperature: float,
  proximal_strength: float = 0.0,
  distillation_strength: float = 0.0,
  distillation_temperature: float = 1.0,
) -> ClientUpdate:
  """FARe-DUST's client (Algorithm 3): rho and T come from `fare_dust`, not `client`."""
  del distillation_temperature
  if distillation_strength:
    raise ValueError(
      f'client.distillation_strength={distillation_strength}: fare_dust distils '
      'from stale teachers with fare_dust.rho; allowed: 0'
    )
  return fare_dust_client_update(
    model,
    optimizer,
    batch_size,
    distillation_strength=rho,
    distillation_temperature=temperature,
    proximal_strength=proximal_strength,
  )


def _fare_dust(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FARe-DUST (Hard et al., Algorithms 1 and 3): FedAdam on the fastest B of B_t, a history of
  the last k rounds' deltas (stragglers folded in) and per-client stale teachers."""
  del context
  s, f = config.scheduler, config.fare_dust
  teacher_learning_rate = (
    config.server.learning_rate if f.teacher_learning_rate is None else f.teacher_learning_rate
  )
  scheduler = FareDustScheduler(
    s.cohort_size,
    local_work_from_config(config),
    s.weighting,
    num_selected=s.num_selected,
    history_length=f.history_length,
    teacher_learning_rate=teacher_learning_rate,
    distill=f.rho > 0,
    empty_history=f.empty_history,
    rng=np.random.default_rng([config.seed, 0xFA2ED5]),
  )  # its own stream, from the run seed
  aggregator = fedopt(_server_optimizer(config, f.server_optimizer))
  if f.ema_decay > 0:
    aggregator = with_ema(aggregator, f.ema_decay)
  return Algorithm(
    'fare_dust',
    scheduler,
    aggregator,
    functools.partial(_fare_dust_client, rho=f.rho, temperature=f.temperature),
  )


def _feast_msg(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FeAST-on-MSG (Hard et al., Algorithm 2): FedAvg on the fastest B of B_t; stragglers within
  tau_max update the evaluated auxiliary model."""
  del context
  s, f = config.scheduler, config.feast
  learning_rate = config.server.learning_rate
  scheduler = FeastScheduler(
    s.cohort_size,
    local_work_from_config(config),
    s.weighting,
    num_selected=s.num_selected,
    tau_max=f.tau_max,
    update_auxiliary=auxiliary_update(learning_rate, f.kappa, f.ema_decay),
    window_close=f.window_close,
  )
  return Algorithm('feast_msg', scheduler, feast_aggregator(learning_rate))


# ---- FedASMU's baselines (Liu et al. 2024, Sec. 5): FedProx, MOON, FedDyn (synchronous) and
# PORT, ASO-Fed, FedSA (asynchronous, on the shared `asynchronous_scheduler`). Each module's
# docstring names its source and the choices made where that source is silent.


def _fedprox(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedProx (Li et al. 2020, Algorithm 2): FedAvg's rounds and server average, every client
  minimising F_k(w) + (mu / 2)||w - w^t||^2 with mu = `client.proximal_strength` (the proximal
  term `get_algorithm` adds to every client objective). mu = 0 is FedAvg. FedProx's variable
  local work for stragglers (gamma-inexact solutions) is `scheduler.time_limit`."""
  return _synchronous(config, context, 'sgd')


def _moon(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """MOON (Li, He and Song 2021, Algorithm 1): FedAvg's rounds and server average; clients add
  mu * the model-contrastive loss (strategy/moon.py)."""
  del context
  s, m = config.scheduler, config.moon
  scheduler = MoonScheduler(
    s.cohort_size,
    local_work_from_config(config),
    s.weighting,
    num_selected=s.num_selected,
    deadline=s.deadline,
    min_responses=s.min_responses,
    contrast=m.mu > 0,
  )
  return Algorithm(
    'moon',
    scheduler,
    fedopt(_server_optimizer(config, 'sgd')),
    functools.partial(moon_client_update, mu=m.mu, temperature=m.temperature),
  )


def _feddyn(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedDyn (Acar et al. 2021, Algorithm 1): synchronous rounds, dynamic regulariser on the
  clients, server state h (strategy/feddyn.py)."""
  s, alpha = config.scheduler, config.feddyn.alpha
  scheduler = FedDynScheduler(
    alpha,
    s.cohort_size,
    local_work_from_config(config),
    s.weighting,
    num_selected=s.num_selected,
    deadline=s.deadline,
    min_responses=s.min_responses,
  )
  return Algorithm(
    'feddyn',
    scheduler,
    feddyn_aggregator(alpha, context.num_clients),
    functools.partial(feddyn_client_update, alpha=alpha),
  )


def _port(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """PORT (Su and Li 2022): buffers of `scheduler.buffer_size` asynchronous updates weighted by
  staleness and similarity to the global progress (strategy/port.py)."""
  p = config.port
  aggregator = port_aggregator(
    context.client_sizes,
    similarity_weight=p.similarity_weight,
    staleness_weight=p.staleness_weight,
    staleness_bound=p.staleness_bound,
    similarity_reference=p.similarity_reference,
    similarity_min_staleness=p.similarity_min_staleness,
  )
  return Algorithm('port', asynchronous_scheduler(config, config.scheduler.buffer_size), aggregator)


def _asofed(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """ASO-Fed (Chen et al. 2020): one update at a time, w <- w + (n_k / n) Delta_k; clients with
  a decayed gradient, a local constraint and a delay-dependent step size (strategy/asofed.py)."""
  a = config.asofed
  clients = AsoFedClients(dynamic_step_size=a.dynamic_step_size, delay_measure=a.delay_measure)
  return Algorithm(
    'asofed',
    clients.scheduler(asynchronous_scheduler(config, 1)),
    asofed_aggregator(context.client_sizes),
    functools.partial(
      asofed_client_update, proximal=a.proximal, decay=a.decay, decay_gradient=a.decay_gradient
    ),
  )


def _fedsa(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedSA (Chen, Mao and Ma 2021): buffers of M = `scheduler.buffer_size` updates, each
  weighted by its examples and s(staleness) (strategy/fedsa.py)."""
  return Algorithm(
    'fedsa',
    asynchronous_scheduler(config, config.scheduler.buffer_size),
    fedsa_aggregator(context.client_sizes, _staleness(config)),
  )


def _fedasmu(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """FedASMU (Liu et al. 2024) and its ablations (`FEDASMU_VARIANTS`): the periodic trigger,
  Formulas 1-3 on the server and the mid-training fetch of Formulas 7-9 (strategy/fedasmu.py)."""
  scheduler, aggregator, make_client_update = build_fedasmu(
    config, context.num_clients, local_work_from_config(config), _staleness(config)
  )
  return Algorithm(config.algorithm, scheduler, aggregator, make_client_update)


ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict, BuildContext], Algorithm]] = {
  'fedavg': functools.partial(_synchronous, optimizer_name='sgd'),
  'fedavgm': functools.partial(_synchronous, optimizer_name='momentum'),
  'fedadam': functools.partial(_synchronous, optimizer_name='adam'),
  'fedyogi': functools.partial(_synchronous, optimizer_name='yogi'),
  'fedadagrad': functools.partial(_synchronous, optimizer_name='adagrad'),
  'fedasync': _fedasync,
  'fedbuff': _fedbuff,
  'fedat': _fedat,
  'fedcompass': functools.partial(_fedcompass, variant='plain'),
  'fedcompass_m': functools.partial(_fedcompass, variant='momentum'),
  'fedcompass_n': functools.partial(_fedcompass, variant='normalized'),
  'ccfedavg': functools.partial(_budgeted, estimator='last_delta'),
  'ccfedavg_c': functools.partial(_budgeted, estimator='switch'),
  'ccfedavg_strategy1': functools.partial(_budgeted, estimator='ignore'),
  'ccfedavg_strategy2': functools.partial(_budgeted, estimator='last_model'),
  'fedavg_dropout': functools.partial(_budgeted, estimator='dropout'),
  'fednova_budget': _fednova_budgeted,
  'fare_dust': _fare_dust,
  'feast_msg': _feast_msg,
  'fedprox': _fedprox,
  'moon': _moon,
  'feddyn': _feddyn,
  'port': _port,
  'asofed': _asofed,
  'fedsa': _fedsa,
  **{name: _fedasmu for name in FEDASMU_VARIANTS},
}


def get_algorithm(config: ml_collections.ConfigDict, context: BuildContext) -> Algorithm:
  """Builds `config.algorithm`, with the shared client regularisers and server EMA applied."""
  if config.algorithm not in ALGORITHMS:
    raise ValueError(f'algorithm={config.algorithm!r} is not known; allowed: {sorted(ALGORITHMS)}')
  algorithm = ALGORITHMS[config.algorithm](config, context)
  client = config.client
  make_client_update = functools.partial(
    algorithm.make_client_update,
    proximal_strength=client.proximal_strength,
    distillation_strength=client.distillation_strength,
    distillation_temperature=client.distillation_temperature,
  )
  aggregator = algorithm.aggregator
  if config.server.ema_decay is not None:
    aggregator = with_ema(aggregator, config.server.ema_decay)
  return algorithm._replace(aggregator=aggregator, make_client_update=make_client_update)
