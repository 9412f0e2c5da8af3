"""Setting groups that algorithm families share, and the pieces built from them.

A family's settings dataclass inherits the groups it reads (fields and checks add up through
`check` / `check_run` / `check_federation`, each calling `super()`), so a setting has one
definition, one default and one check wherever it appears.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from fedsim_jax.algorithms.base import BuildContext, MakeClientUpdate, RunFacts
from fedsim_jax.client import Prelude, local_update, regularised_objective
from fedsim_jax.client.objective import Term
from fedsim_jax.settings import (
  ConfigError,
  Settings,
  boolean,
  decay,
  number,
  one_of,
  positive,
  setting,
)
from fedsim_jax.strategy.asynchronous import AsynchronousScheduler
from fedsim_jax.strategy.client_state import ClientState
from fedsim_jax.strategy.ema import WARMUPS as EMA_WARMUPS
from fedsim_jax.strategy.ema import with_ema
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.periodic_trigger import TRIGGER_TIMINGS, PeriodicTriggerScheduler
from fedsim_jax.strategy.server_optimizers import ADAPTIVE_FORMS, server_optimizer
from fedsim_jax.strategy.staleness import STALENESS_FUNCTIONS, make_staleness
from fedsim_jax.strategy.synchronous import WEIGHTINGS, SynchronousScheduler


@dataclasses.dataclass(frozen=True)
class HeldModels:
  """Model-sized arrays a run holds at once because of one setting (for the memory estimate).

  Attributes:
    setting: the setting that decides how many (e.g. 'algorithm.kwargs.concurrency').
    copies: how many model-sized arrays.
    what: what they are, in a few words.
    shared_start: the copies are tasks that all start from one model (a synchronous round's
      cohort), rather than each from the model of its own dispatch.
    tasks_per_version: tasks that start from one server version's model, at the fewest once
      the first tasks have been replaced (a buffer of K arrivals is refilled by K tasks), so
      the copies hold `copies / tasks_per_version` start models or more.
  """

  setting: str
  copies: float
  what: str
  shared_start: bool = False
  tasks_per_version: int = 1


@dataclasses.dataclass(frozen=True)
class Base(Settings):
  """Cooperative hooks every group extends."""

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    """Rules that involve the run's other sections (before any data is loaded)."""

  def check_federation(self, num_clients: int, prefix: str) -> None:
    """Rules that involve the built federation's size."""

  def tasks_in_flight(self, num_clients: int) -> HeldModels | None:
    """The most client tasks in flight at once (each holds its start model and, once
    computed, its update); None: not known to this group."""
    return None

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    """Per-client or history arrays the algorithm keeps besides its tasks."""
    return []


def _at_most_clients(name: str, value: int | None, num_clients: int, what: str) -> None:
  if value is not None and value > num_clients:
    raise ConfigError(f'{name}={value} is invalid; allowed values: 1..{what} ({num_clients})')


@dataclasses.dataclass(frozen=True)
class LocalWorkSettings(Base):
  """How much a task trains: `client.local_steps` / `client.local_epochs`, or as many steps as
  fit in a time limit (the straggler paper's time-limited clients, Sec. 2.1)."""

  time_limit: float | None = setting(
    None, positive(optional=True), 'seconds of on-device compute per task'
  )
  time_limit_percentile: float | None = setting(
    None,
    number(above=0, maximum=100, optional=True),
    "the limit as this percentile of the population's one-epoch compute time (paper: 75)",
  )
  limit_includes_overhead: bool = setting(True, boolean, 'the overhead C counts against it')

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.time_limit is not None and self.time_limit_percentile is not None:
      raise ConfigError(f'{prefix}time_limit / {prefix}time_limit_percentile: set at most one')

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    limited = self.time_limit is not None or self.time_limit_percentile is not None
    if run.local_steps is None and run.local_epochs is None and not limited:
      raise ConfigError(
        f'client.local_steps / client.local_epochs / {prefix}time_limit: set one of them'
      )

  def local_work(self, context: BuildContext) -> LocalWork:
    return LocalWork(
      steps=context.run.local_steps,
      epochs=context.run.local_epochs,
      batch_size=context.run.batch_size,
      sampling=context.run.sampling,
      time_limit=self.time_limit,
      limit_includes_overhead=self.limit_includes_overhead,
    )


@dataclasses.dataclass(frozen=True)
class CohortSizeSettings(Base):
  """B clients selected per round, at most the federation."""

  cohort_size: int = setting(10, positive(integer=True), 'B: clients selected per round')

  def tasks_in_flight(self, num_clients: int) -> HeldModels | None:
    selected = getattr(self, 'num_selected', None)
    if selected is not None:
      return HeldModels(
        'algorithm.kwargs.num_selected', selected, 'client tasks per round', shared_start=True
      )
    return HeldModels(
      'algorithm.kwargs.cohort_size', self.cohort_size, 'client tasks per round', shared_start=True
    )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    self.check_federation(run.num_clients, prefix, 'data.num_clients')

  def check_federation(self, num_clients: int, prefix: str, what: str = 'the federation size'):
    super().check_federation(num_clients, prefix)
    _at_most_clients(f'{prefix}cohort_size', self.cohort_size, num_clients, what)


@dataclasses.dataclass(frozen=True)
class CohortSettings(CohortSizeSettings):
  """Synchronous rounds of B clients, optionally over-selecting B_t >= B (Bonawitz et al.)."""

  weighting: str = setting('num_examples', one_of(WEIGHTINGS), 'update weights')
  num_selected: int | None = setting(
    None, positive(integer=True, optional=True), 'B_t >= B selected per round (over-selection)'
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.num_selected is not None and self.num_selected < self.cohort_size:
      raise ConfigError(
        f'{prefix}num_selected={self.num_selected} is invalid; allowed values: '
        f'cohort_size ({self.cohort_size})..data.num_clients'
      )

  def check_federation(self, num_clients: int, prefix: str, what: str = 'the federation size'):
    super().check_federation(num_clients, prefix, what)
    _at_most_clients(f'{prefix}num_selected', self.num_selected, num_clients, what)


@dataclasses.dataclass(frozen=True)
class DeadlineSettings(CohortSettings):
  """Rounds that close after a deadline with whoever reported."""

  deadline: float | None = setting(None, positive(optional=True), 'seconds per round')
  min_responses: int = setting(1, positive(integer=True), 'with a deadline')

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.min_responses > self.cohort_size:
      raise ConfigError(
        f'{prefix}min_responses={self.min_responses} is invalid; allowed values: '
        f'1..cohort_size ({self.cohort_size})'
      )


def synchronous_scheduler(
  settings: DeadlineSettings, context: BuildContext, cls=None, **hooks: Any
) -> SynchronousScheduler:
  """The synchronous rounds FedAvg-like algorithms share (`cls`: a `SynchronousScheduler`
  subclass with the same arguments; `hooks`: its `task_inputs` and `round_closing`, for the
  schedulers that keep state around the rounds)."""
  return (cls or SynchronousScheduler)(
    settings.cohort_size,
    settings.local_work(context),  # type: ignore[attr-defined]
    settings.weighting,
    num_selected=settings.num_selected,
    deadline=settings.deadline,
    min_responses=settings.min_responses,
    **hooks,
  )


@dataclasses.dataclass(frozen=True)
class SlotSettings(Base):
  """Asynchronous slots: at most `concurrency` tasks in flight, refilled at once or, with
  `trigger_period`, by FedASMU's periodic trigger (Alg. 1 lines 1-6)."""

  concurrency: int = setting(10, positive(integer=True), 'tasks in flight')

  def tasks_in_flight(self, num_clients: int) -> HeldModels | None:
    # A buffered variant refills its K slots at each server version (`buffer_size`).
    return HeldModels(
      'algorithm.kwargs.concurrency',
      self.concurrency,
      'client tasks in flight',
      tasks_per_version=getattr(self, 'buffer_size', 1),
    )

  max_staleness: int | None = setting(
    None, positive(integer=True, allow_zero=True, optional=True), 'staler arrivals are discarded'
  )
  trigger_period: float | None = setting(
    None, positive(optional=True), 'calligraphic T: seconds between triggers (Table 5: 10)'
  )
  trigger_count: int = setting(10, positive(integer=True), "m': devices started per trigger")
  trigger_timing: str = setting(
    'periodic', one_of(TRIGGER_TIMINGS), "or 'after_trigger' (Alg. 1's Sleep as printed)"
  )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    self.check_federation(run.num_clients, prefix, 'data.num_clients')

  def check_federation(self, num_clients: int, prefix: str, what: str = 'the federation size'):
    super().check_federation(num_clients, prefix)
    _at_most_clients(f'{prefix}concurrency', self.concurrency, num_clients, what)


@dataclasses.dataclass(frozen=True)
class AsynchronousSettings(SlotSettings):
  """The asynchronous scheduler every buffered algorithm shares: slots, update weights, and
  `buffer_size` arrivals per server update."""

  weighting: str = setting('num_examples', one_of(WEIGHTINGS), 'update weights')

  def asynchronous_scheduler(
    self, context: BuildContext, buffer_size: int, client_state: ClientState | None = None
  ) -> Any:
    """`buffer_size` arrivals per server update; slots refilled at once or periodically;
    `client_state`: the algorithm's per-client task inputs (strategy/client_state.py)."""
    local_work = self.local_work(context)  # type: ignore[attr-defined]
    if self.trigger_period is not None:
      return PeriodicTriggerScheduler(
        self.trigger_period,
        self.trigger_count,
        self.concurrency,
        buffer_size,
        local_work,
        self.weighting,
        self.max_staleness,
        self.trigger_timing,
        client_state=client_state,
      )
    return AsynchronousScheduler(
      self.concurrency,
      buffer_size,
      local_work,
      self.weighting,
      self.max_staleness,
      client_state=client_state,
    )


@dataclasses.dataclass(frozen=True)
class ServerOptimizerSettings(Base):
  """The server optimizer's hyperparameters (the optimizer itself is chosen by the algorithm
  name or a `server_optimizer` field)."""

  server_learning_rate: float = setting(1.0, positive(), 'eta_g')
  server_momentum: float = setting(0.9, decay(), 'momentum optimizers')
  b1: float = setting(0.9, decay(), 'adam / yogi / adagrad')
  b2: float = setting(0.99, decay(), 'adam / yogi / adagrad')
  eps: float = setting(1e-3, positive(), 'adaptivity tau of Reddi et al.')
  adaptive_form: str = setting(
    'reddi', one_of(ADAPTIVE_FORMS), "Reddi et al.'s Algorithm 2 as written, or 'optax'"
  )

  def make_server_optimizer(self, name: str):
    return server_optimizer(
      name,
      self.server_learning_rate,
      momentum=self.server_momentum,
      b1=self.b1,
      b2=self.b2,
      eps=self.eps,
      adaptive_form=self.adaptive_form,
    )


@dataclasses.dataclass(frozen=True)
class StalenessSettings(Base):
  """s(u), the staleness function."""

  staleness: str = setting('polynomial', one_of(STALENESS_FUNCTIONS), "'constant' for none")
  staleness_a: float = setting(0.5, positive(allow_zero=True), 'exponent / rate a')
  staleness_b: float = setting(4.0, positive(allow_zero=True), 'hinge b')

  def staleness_function(self):
    return make_staleness(self.staleness, a=self.staleness_a, b=self.staleness_b)


@dataclasses.dataclass(frozen=True)
class ClientTermsSettings(Base):
  """Regularisers of the client objective: FedProx's proximal term (`+ L2 reg.` nu) and
  distillation from the downloaded model (`+ KD reg.` rho), added to the cross-entropy."""

  proximal_strength: float = setting(0.0, positive(allow_zero=True), 'mu / nu')
  distillation_strength: float = setting(0.0, positive(allow_zero=True), 'rho')
  distillation_temperature: float = setting(1.0, positive(), 'T of the distillation loss')

  def client_objective(self) -> tuple[Term, ...]:
    """CE + (nu / 2) ||w - w_0||^2 + rho * T^2 KL(p_{w_0}^T || p_w^T), zero terms left out."""
    return regularised_objective(
      self.proximal_strength, self.distillation_strength, self.distillation_temperature
    )

  def make_client_update(self, prelude: Prelude | None = None) -> MakeClientUpdate:
    """`local_update` on `client_objective()`, with an optional step prelude."""
    return functools.partial(local_update, objective=self.client_objective(), prelude=prelude)


def ema_warmup_setting(default: str = 'none') -> Any:
  """The `ema_warmup` setting of every algorithm that evaluates an EMA (`strategy/ema.py`):
  'none' (the EMA starts at the initial model) unless the algorithm's paper says otherwise."""
  return setting(
    default,
    one_of(EMA_WARMUPS),
    "EMA start: 'none' (the initial model), 'bias_correction' or TF's 'num_updates'",
  )


@dataclasses.dataclass(frozen=True)
class ServerEmaSettings(Base):
  """Evaluate an exponential moving average of the server weights (FedBuff `+ EMA`)."""

  ema_decay: float | None = setting(
    None, number(minimum=0, below=1, optional=True), 'beta of the evaluated EMA'
  )
  ema_warmup: str = ema_warmup_setting()

  def with_ema(self, aggregator):
    if self.ema_decay is None:
      return aggregator
    return with_ema(aggregator, self.ema_decay, self.ema_warmup)
