"""FedCompass (Li et al. 2024) and its +M / +N variants: the Compass scheduler (arrival groups,
per-client local steps Q in [q_min, q_max] from estimated speeds, latest arrival time factor
lambda; Algorithms 1-2) and the buffered, staleness-scaled group update (Algorithm 3). +M adds
server momentum, +N averages each group's deltas normalised.

FedCompass (Li et al. 2024, "FedCompass: Efficient Cross-Silo Federated Learning on
Heterogeneous Client Devices using a Computing Power-Aware Scheduler"), Algorithms 1-3.

The Compass scheduler estimates each client's time per local step S and gives clients different
numbers of local steps Q in [Q_min, Q_max] so that the members of an *arrival group* finish
together at the group's expected arrival time T_a. A group aggregates once: when its last member
arrives, or when a timer fires at its latest arrival time T_max = T_create + lambda (T_a -
T_create). Updates arriving after T_max go to a general buffer that joins the next group
aggregation, and the late client is reassigned at once. Each client's first update is applied
immediately (FedAsync-style). Every buffered update is scaled when it is buffered by
st(tau_g - tau_i) p_i with st(u) = alpha (u + 1)^-a.

The scheduler is host-side Python; the server update is a jitted aggregator (`compass_aggregator`)
that applies w <- w - (group buffer + general buffer). FedCompass+M (server momentum) and
FedCompass+N (FedNova-style normalized averaging) swap its server optimizer and reducer
(fedsim_jax/algorithms/fedcompass.py chooses them by algorithm name).

Where the paper is silent (each choice is a constructor argument):
- speed estimate S: `speed_estimator='last'` records the newest measured time per step (the
  paper's "record client speed"); 'ema' is the public code's moving average,
  S <- m S_measured + (1 - m) S with m = `speed_momentum` (0.9): the newest measurement weighs
  0.9 (App. G.2, Figure 20: client 3 speeds up from 4 to 5 steps/min and is then assigned
  Q = 48 by 'ema', 50 by 'last').
- CREATEGROUP: `create_rule='paper'` follows Algorithm 2 as printed (candidates from groups with
  T_now < T_a, T_exp = T_a + S_fastest Q_max, maximum taken before clamping); 'code' follows the
  public code (T_max instead of T_a, candidates above Q_max dropped before the maximum).
- "the fastest client in group g" ranges over its pending and arrived clients (as the code).
- a group timer that fires before any member arrived aggregates nothing (as the code).
- floor() of a step count adds 1e-9 first, so that exact example values (Figure 1) are not lost
  to rounding.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import ClientTermsSettings, HeldModels, ServerEmaSettings
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import ConfigError, boolean, decay, number, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.reducers import Reducer, fednova_mean, staleness_scaled, weighted_sum
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.staleness import polynomial, scaled
from fedsim_jax.strategy.synchronous import WEIGHTINGS, Weighting, check_weighting


class SpeedEstimator(StrEnum):
  """How a client's step time is estimated (`algorithm.kwargs.speed_estimator`)."""

  LAST = 'last'
  EMA = 'ema'


class CreateRule(StrEnum):
  """CREATEGROUP's reference arrival time (`algorithm.kwargs.create_rule`)."""

  PAPER = 'paper'
  CODE = 'code'


SPEED_ESTIMATORS = tuple(estimator.value for estimator in SpeedEstimator)
CREATE_RULES = tuple(rule.value for rule in CreateRule)


def compass_aggregator(
  alpha: float = 0.9,
  a: float = 0.5,
  optimizer: optax.GradientTransformation = optax.sgd(1.0),  # noqa: B008 (pure functions)
  reducer: Reducer = weighted_sum(),  # noqa: B008 (a pure function: calls share no state)
  optimize_first_arrivals: bool = True,
) -> Aggregator:
  """w <- w - sum_k st(u_k) p_k Delta_k over the aggregated buffers (Algorithm 3, line 4), with
  st(u) = alpha (u + 1)^-a.

  FedCompass+M is `optimizer=optax.sgd(1.0, momentum=beta)` (m <- beta m + buffers; w <- w - m);
  FedCompass+N is `reducer=fednova_mean()` (each term divided by its Q_k, the sum multiplied by
  sum p Q / sum p). With `optimize_first_arrivals=False`, a client's first update, which the
  scheduler applies alone before the client has an arrival group (its row's `group` is -1,
  Algorithm 1 line 25), is applied as it is: the server optimizer (and its state, e.g.
  +M's momentum) acts in group aggregation only, as the paper describes +M ("momentum in group
  aggregation") and the public code does.
  """
  reduce = staleness_scaled(reducer, scaled(alpha, polynomial(a)))
  optimized = server_update(optimizer, reduce)
  if optimize_first_arrivals:
    return optimized

  def apply_plain(state: Any, updates: UpdateBatch) -> Any:
    return state.replace(params=optax.apply_updates(state.params, reduce(updates, updates.weights)))

  def apply(state: Any, updates: UpdateBatch) -> Any:
    first_arrival = jnp.all(jnp.where(updates.mask, updates.group < 0, True))
    # Only the taken branch runs: a batch is either one first arrival or a group's updates.
    return jax.lax.cond(first_arrival, apply_plain, optimized.apply, state, updates)

  return Aggregator(init=optimized.init, apply=apply)


@dataclasses.dataclass
class ClientRecord:
  """C[i] of Algorithm 1: arrival group, local steps, time per step, round start time."""

  group: int | None = None
  steps: int = 0
  step_time: float | None = None
  start_time: float = 0.0


@dataclasses.dataclass
class ArrivalGroup:
  """G[g]: pending (CL) and arrived (ACL) clients, expected and latest arrival times, and the
  group buffer of (update, staleness at buffering)."""

  pending: set[int]
  arrived: list[int]
  expected_arrival: float
  latest_arrival: float
  buffer: list[tuple[TaskHandle, int]] = dataclasses.field(default_factory=list)
  aggregated: bool = False


class CompassScheduler:
  """The Compass scheduler (Algorithms 1 and 2, GROUPAGGREGATE of Algorithm 3).

  Args:
    q_min, q_max: bounds on local steps per round.
    latest_time_factor: lambda (1.2 in the paper).
    weighting: p_i = n_i / n ('num_examples', "relative data sample size") or 1/m ('uniform').
    speed_estimator: 'last' or 'ema' (see the module docstring).
    speed_momentum: the newest measurement's weight m in 'ema' (the public code's
      `speed_momentum`).
    create_rule: 'paper' or 'code' (see the module docstring).
  """

  def __init__(
    self,
    q_min: int,
    q_max: int,
    latest_time_factor: float = 1.2,
    weighting: str = 'num_examples',
    speed_estimator: str = 'last',
    speed_momentum: float = 0.9,
    create_rule: str = 'paper',
  ):
    check_weighting(weighting)
    if not 1 <= q_min <= q_max:
      raise ValueError(
        f'algorithm.kwargs.q_min={q_min}, algorithm.kwargs.q_max={q_max}; need 1 <= q_min <= q_max'
      )
    if latest_time_factor < 1:
      raise ValueError(f'algorithm.kwargs.latest_time_factor={latest_time_factor}; must be >= 1')
    if speed_estimator not in SPEED_ESTIMATORS:
      raise ValueError(
        f'algorithm.kwargs.speed_estimator={speed_estimator!r}; allowed: {SPEED_ESTIMATORS}'
      )
    if not 0 <= speed_momentum < 1:
      raise ValueError(f'algorithm.kwargs.speed_momentum={speed_momentum}; allowed: 0 <= x < 1')
    if create_rule not in CREATE_RULES:
      raise ValueError(f'algorithm.kwargs.create_rule={create_rule!r}; allowed: {CREATE_RULES}')
    self.q_min = q_min
    self.q_max = q_max
    self.latest_time_factor = latest_time_factor
    self.weighting = weighting
    self.speed_estimator = SpeedEstimator(speed_estimator)
    self.speed_momentum = speed_momentum
    self.create_rule = CreateRule(create_rule)
    self.clients: dict[int, ClientRecord] = {}
    self.groups: dict[int, ArrivalGroup] = {}
    self.general_buffer: list[tuple[TaskHandle, int]] = []
    self._next_group = 0
    self._weights: list[float] = []

  # ---- Algorithm 1 -----------------------------------------------------------------------

  def start(self, sim: SchedulerContext) -> None:
    sizes = sim.client_sizes.astype(float)
    self._weights = (
      list(sizes / sizes.sum())
      if self.weighting == Weighting.NUM_EXAMPLES
      else [1.0 / sim.num_clients] * sim.num_clients
    )
    for client in range(sim.num_clients):  # warm-up: every client runs Q_min steps (line 8)
      self.clients[client] = ClientRecord()
      self._train(sim, client, self.q_min)

  def _train(self, sim: SchedulerContext, client: int, steps: int) -> None:
    record = self.clients[client]
    record.steps = steps
    record.start_time = sim.now
    sim.dispatch(client, steps, metadata={'group': -1 if record.group is None else record.group})

  def _record_speed(self, client: int, now: float) -> None:
    record = self.clients[client]
    measured = (now - record.start_time) / record.steps
    if record.step_time is None or self.speed_estimator == SpeedEstimator.LAST:
      record.step_time = measured
    else:
      record.step_time = (
        self.speed_momentum * measured + (1 - self.speed_momentum) * record.step_time
      )

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    client = handle.client_id
    record = self.clients[client]
    self._record_speed(client, sim.now)  # line 12
    staleness = sim.version - handle.version
    if record.group is None:  # first response
      sim.apply_updates([handle], [self._weights[client]], staleness=[staleness])  # line 25
      self._assign_group(sim, client)
      self._train(sim, client, record.steps)
      return
    group_id = record.group
    group = self.groups[group_id]
    group.pending.discard(client)
    group.arrived.append(client)  # line 14
    # Late: after T_max (15-19), or after its group aggregated (an arrival at exactly T_max is
    # on time: arrivals pop before the group's timer at the same instant).
    if sim.now > group.latest_arrival or group.aggregated:
      self.general_buffer.append((handle, staleness))
      self._assign_group(sim, client)
      self._train(sim, client, record.steps)
      if not group.pending:
        del self.groups[group_id]
    else:  # on time: 20-23
      group.buffer.append((handle, staleness))
      if not group.pending:
        self._group_aggregate(sim, group_id)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    kind, group_id = payload
    if kind == 'latest_arrival':
      self._group_aggregate(sim, group_id)

  # ---- Algorithm 3 -----------------------------------------------------------------------

  def _group_aggregate(self, sim: SchedulerContext, group_id: int) -> None:
    group = self.groups.get(group_id)
    if group is None or group.aggregated:
      return
    group.aggregated = True
    if not group.pending:
      del self.groups[group_id]
    if not group.buffer:
      return  # nobody arrived in time: nothing to aggregate (as the public code)
    entries = group.buffer + self.general_buffer
    self.general_buffer = []
    handles = [h for h, _ in entries]
    sim.apply_updates(
      handles, [self._weights[h.client_id] for h in handles], staleness=[s for _, s in entries]
    )  # line 4
    on_time = [h.client_id for h, _ in group.buffer]
    for client in sorted(on_time, key=self._step_time):  # fastest first
      self._assign_group(sim, client)
      self._train(sim, client, self.clients[client].steps)

  # ---- Algorithm 2 -----------------------------------------------------------------------

  @staticmethod
  def _floor(x: float) -> int:
    return math.floor(x + 1e-9)

  def _assign_group(self, sim: SchedulerContext, client: int) -> None:
    if not self._join_group(sim, client):
      self._create_group(sim, client)

  def _step_time(self, client: int) -> float:
    """The client's recorded time per step (set by its first arrival, before any grouping)."""
    step_time = self.clients[client].step_time
    assert step_time is not None
    return step_time

  def _open_groups(self):
    return [(g, group) for g, group in self.groups.items() if not group.aggregated]

  def _join_group(self, sim: SchedulerContext, client: int) -> bool:
    step_time = self._step_time(client)
    best_group, best_steps = -1, -1
    for g, group in self._open_groups():
      q = self._floor((group.expected_arrival - sim.now) / step_time)
      if self.q_min <= q <= self.q_max and q >= best_steps:  # line 9
        best_group, best_steps = g, q
    if best_group == -1:
      return False
    self.groups[best_group].pending.add(client)
    record = self.clients[client]
    record.group, record.steps = best_group, best_steps
    return True

  def _create_group(self, sim: SchedulerContext, client: int) -> None:
    step_time = self._step_time(client)
    candidates = []
    for _, group in self._open_groups():
      reference = (
        group.expected_arrival if self.create_rule == CreateRule.PAPER else group.latest_arrival
      )
      if sim.now < reference:  # line 21
        members = list(group.pending) + group.arrived
        fastest = min(self._step_time(m) for m in members)
        expected_return = reference + fastest * self.q_max  # line 23
        candidates.append(self._floor((expected_return - sim.now) / step_time))
    if self.create_rule == CreateRule.CODE:
      candidates = [q for q in candidates if q <= self.q_max]
    steps = max(candidates, default=-1)
    if 0 <= steps < self.q_min:  # lines 25-29
      steps = self.q_min
    elif steps < 0 or steps > self.q_max:
      steps = self.q_max
    group_id = self._next_group
    self._next_group += 1
    duration = steps * step_time
    self.groups[group_id] = ArrivalGroup(
      pending={client},
      arrived=[],
      expected_arrival=sim.now + duration,
      latest_arrival=sim.now + duration * self.latest_time_factor,
    )
    record = self.clients[client]
    record.group, record.steps = group_id, steps
    sim.set_timer(self.groups[group_id].latest_arrival, ('latest_arrival', group_id))


@dataclasses.dataclass(frozen=True)
class CompassSettings(ClientTermsSettings, ServerEmaSettings):
  q_min: int = setting(40, positive(integer=True), 'Q_min: fewest local steps of a task')
  q_max: int = setting(200, positive(integer=True), 'Q_max: most local steps of a task')
  latest_time_factor: float = setting(1.2, number(minimum=1), 'lambda')
  weighting: str = setting('num_examples', one_of(WEIGHTINGS), 'p_k')
  speed_estimator: str = setting('last', one_of(SPEED_ESTIMATORS), "or 'ema' (public code)")
  speed_momentum: float = setting(0.9, decay(), "'ema': the newest measurement's weight")
  create_rule: str = setting('paper', one_of(CREATE_RULES), "CREATEGROUP as printed, or 'code'")
  alpha: float = setting(0.9, number(above=0, maximum=1), 'alpha of st(u) = alpha (u + 1)^-a')
  staleness_a: float = setting(0.5, positive(allow_zero=True), 'a of st(u)')
  server_momentum: float = setting(0.9, decay(), 'fedcompass_m')
  first_arrival_momentum: bool = setting(
    False,
    boolean,
    "fedcompass_m: also apply momentum to a client's first (ungrouped) update; the paper and "
    'its code apply it in group aggregation only',
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.q_min > self.q_max:
      raise ConfigError(
        f'{prefix}q_min={self.q_min} is invalid; allowed values: 1..{prefix}q_max ({self.q_max})'
      )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.local_steps is not None or run.local_epochs is not None:
      raise ConfigError(
        'client.local_steps / client.local_epochs: FedCompass chooses local steps itself '
        f'({prefix}q_min..q_max); allowed values: None'
      )

  def tasks_in_flight(self, num_clients: int) -> HeldModels | None:
    return HeldModels('data.num_clients', num_clients, 'client tasks (every client trains)')


# Each variant's server optimizer and reducer of the staleness-scaled buffers (by algorithm name).
VARIANTS: dict[str, Callable[[CompassSettings], tuple[optax.GradientTransformation, Reducer]]] = {
  # Algorithm 3 line 4: the buffers' sum st(u_k) p_k Delta_k, applied as it is.
  'fedcompass': lambda settings: (optax.sgd(1.0), weighted_sum()),
  # +M: server momentum on that sum (m <- beta m + buffers; w <- w - m).
  'fedcompass_m': lambda settings: (
    optax.sgd(1.0, momentum=settings.server_momentum),
    weighted_sum(),
  ),
  # +N: FedNova-style normalized averaging (each term over its Q_k, times sum p Q / sum p).
  'fedcompass_n': lambda settings: (optax.sgd(1.0), fednova_mean()),
}


def fedcompass_algorithm(settings: CompassSettings, context: BuildContext) -> Algorithm:
  scheduler = CompassScheduler(
    settings.q_min,
    settings.q_max,
    settings.latest_time_factor,
    settings.weighting,
    settings.speed_estimator,
    settings.speed_momentum,
    settings.create_rule,
  )
  optimizer, reducer = VARIANTS[context.name](settings)
  aggregator = compass_aggregator(
    settings.alpha,
    settings.staleness_a,
    optimizer,
    reducer,
    optimize_first_arrivals=settings.first_arrival_momentum,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )


for _name in VARIANTS:
  register(_name, CompassSettings)(fedcompass_algorithm)
