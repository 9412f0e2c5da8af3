"""FeAST-on-MSG (Hard et al., "Learning from straggler clients", Sec. 2.3, Algorithm 2).

FedAvg (server learning rate eta_g) on the fastest B of B_t; stragglers that arrive within
tau_max of their round update the evaluated auxiliary model a (Equations 1-2). Defaults: the
EMNIST `per-example` values of Table 18 (eta_g 0.006, beta 0.95, kappa 0; Table 19,
`per-domain`: eta_g 0.006, beta 0.99, kappa 0.9), App. G.4's tau_max of 100,000 s, and
Algorithm 2's unweighted sums (`weighting='uniform'`). eta_g is Algorithm 2's, the same rule
as the code's (w_{t+1} = w_t - (eta_g / b_t) Delta_t, with the code's sign of the delta), so
Table 18's tuned value applies as it is, though it is far below FedAvg's 1 (Table 10).

FeAST-on-MSG: Federated Asynchronous Straggler Training on Mismatched and Stale Gradients.

Hard et al., "Learning from straggler clients in federated learning", Section 2.3, Equations (1)
and (2), Appendix A (Algorithm 2, Figure 5); tuned values in Tables 18-19, tau_max and server
optimizer in Appendix G.4.

The global model w advances as in FedAvg on the fastest B of the B_t clients of each round
(Algorithm 2 lines 6-10) and the next round starts at once. Each round t also keeps w_t and its
fast delta sum Delta_t for tau_max seconds after the round started (line 5 resets the clock
before waiting for the fast clients); stragglers of round t arriving in that window are added
(lines 12-15), giving Delta_t^+ over B_t^+ = |C_t^fast| + |C_t^slow| updates. When the window
closes,

  w_{t+1}^+ = w_t - (eta_g / B_t^+) Delta_t^+                                            (1)
  a_{t+1}   = beta (a_t - (eta_a / B_t^+) Delta_t^+) + (1 - beta) w_{t+1}^+              (2)

with eta_a = kappa eta_g (App. G.4) and a_0 = w_0; a is the evaluated model (Output: a_T;
exposed as `state.eval_params`).
The paper's Delta is old - new (its updates subtract it); this code base's deltas are
new - old, so with mean^+ = Delta^+ / B^+ in our sign, w^+ = w_t + eta_g mean^+ and
a <- beta (a + eta_a mean^+) + (1 - beta) w^+. Stragglers arriving later than tau_max after
their round started are discarded with reason 'beyond_tau_max'.

Choices where the paper is silent or inconsistent (settings in `algorithm.kwargs` in brackets
where the choice can change results):
  * [`tau_max`] seconds of virtual time, measured from the round's start ("maximum amount of
    time", Sec. 2.3; 100,000 s in every experiment, App. G.4). An arrival exactly at the limit
    counts; the limit must be finite.
  * [`window_close`] 'complete' (default): a window closes at tau_max or as soon as every
    straggler of its round has reported or gone offline, whichever is first. Nothing can change
    Delta_t^+ afterwards, so a_{t+1} is the one waiting would give, without holding the
    auxiliary model back by tau_max (100,000 s exceeds the paper's whole training time).
    'tau_max': windows close only at tau_max (Algorithm 2 read literally; Figure 5's
    "checkpoints ... formed as the maximum wait times for each round elapse").
  * The auxiliary updates are applied in round order (the recursion of Eq. (2) is over t): a
    closed window waits for the windows of earlier rounds. With 'tau_max' closing this is also
    the order in which windows close.
  * The main branch is FedAvg with server learning rate eta_g (`server_learning_rate`; "used in
    conjunction with the FedAvg server optimizer", G.4); Eq. (1) uses the same eta_g.
  * B^+ normalisation: mean^+ is Delta_t^+ weighted by the scheduler's aggregation weights over
    their sum; with `weighting='uniform'` (the paper) it is exactly Delta_t^+ / B_t^+.
  * beta may be 0 (a = w^+) for degenerate checks; the paper tunes beta in [0.9, 0.999].
  * Windows still open when the run stops never update a (the paper's a_T has the same cut).
Stragglers folded into Delta^+ count as aggregated updates (`Simulation.fold_in`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import ClientTermsSettings, CohortSettings, LocalWorkSettings
from fedsim_jax.algorithms.stragglers.fare_dust import weighted_delta_sum
from fedsim_jax.models import Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import decay, number, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import (
  WEIGHTINGS,
  ClosingRound,
  SynchronousScheduler,
  update_weights,
)

BEYOND_TAU_MAX = 'beyond_tau_max'
_WINDOW_TIMER = 'feast_window'


class WindowClose(StrEnum):
  """When a round's straggler window closes (`algorithm.kwargs.window_close`)."""

  COMPLETE = 'complete'
  TAU_MAX = 'tau_max'


WINDOW_CLOSE_RULES = tuple(rule.value for rule in WindowClose)


@flax.struct.dataclass
class FeastState:
  """Server state: the global model's FedAvg state and the auxiliary model a_t."""

  inner: Any
  auxiliary: Params

  @property
  def params(self) -> Params:
    return self.inner.params

  @property
  def eval_params(self) -> Params:
    return self.auxiliary


def feast_aggregator(server_learning_rate: float) -> Aggregator:
  """The global model's update (Algorithm 2 line 10: FedAvg with eta_g); `a_0 = w_0` and the
  auxiliary model is left to `auxiliary_update`."""
  inner = server_update(optax.sgd(server_learning_rate))

  def init(params: Params) -> FeastState:
    return FeastState(inner=inner.init(params), auxiliary=params)

  def apply(state: FeastState, updates: UpdateBatch) -> FeastState:
    return FeastState(inner=inner.apply(state.inner, updates), auxiliary=state.auxiliary)

  return Aggregator(init=init, apply=apply)


@functools.partial(jax.jit, static_argnames=('server_learning_rate', 'kappa', 'decay'))
def _updated_auxiliary(
  state: FeastState,
  start_params: Params,
  delta_sum: Params,
  weight_sum: jax.Array,
  *,
  server_learning_rate: float,
  kappa: float,
  decay: float,
) -> FeastState:
  auxiliary_learning_rate = kappa * server_learning_rate

  def leaf(a, w, d):
    mean = d / weight_sum
    w_plus = w + server_learning_rate * mean
    return decay * (a + auxiliary_learning_rate * mean) + (1 - decay) * w_plus

  return dataclasses.replace(
    state, auxiliary=jax.tree_util.tree_map(leaf, state.auxiliary, start_params, delta_sum)
  )


@dataclasses.dataclass(frozen=True)
class AuxiliaryUpdate:
  """`(state, w_t, delta_sum, weight_sum) -> state` with a_{t+1} of Equations (1)-(2):

  mean = delta_sum / weight_sum                      (Delta_t^+ / B_t^+, deltas new - old)
  w^+  = w_t + eta_g mean
  a    = decay (a + kappa eta_g mean) + (1 - decay) w^+

  A plain dataclass over one jitted function, so that the scheduler holding it stays
  checkpointable.
  """

  server_learning_rate: float
  kappa: float
  decay: float

  def __call__(
    self, state: FeastState, start_params: Params, delta_sum: Params, weight_sum: jax.Array
  ) -> FeastState:
    return _updated_auxiliary(
      state,
      start_params,
      delta_sum,
      weight_sum,
      server_learning_rate=self.server_learning_rate,
      kappa=self.kappa,
      decay=self.decay,
    )


def auxiliary_update(server_learning_rate: float, kappa: float, decay: float) -> AuxiliaryUpdate:
  """The auxiliary model's update with FeAST-on-MSG's constants (see `AuxiliaryUpdate`)."""
  if server_learning_rate <= 0:
    raise ValueError(f'algorithm.kwargs.server_learning_rate={server_learning_rate}; must be > 0')
  if kappa < 0:
    raise ValueError(f'algorithm.kwargs.kappa={kappa}; must be >= 0')
  if not 0 <= decay < 1:
    raise ValueError(f'algorithm.kwargs.ema_decay={decay}; allowed: 0 <= decay < 1')
  return AuxiliaryUpdate(float(server_learning_rate), float(kappa), float(decay))


@dataclasses.dataclass(eq=False)
class StragglerWindow:
  """Round t while its stragglers may still report (Algorithm 2 lines 11-15).

  Attributes:
    round_index: t.
    start_time: virtual time the round started.
    start_params: w_t.
    delta_sum: sum_c p_c Delta^c over the fast and folded straggler updates (Delta_t^+).
    weight_sum: sum_c p_c (B_t^+ under uniform weights).
    count: B_t^+.
    pending: the round's stragglers still training.
    closed: no more updates can join.
  """

  round_index: int
  start_time: float
  start_params: Params
  delta_sum: Params
  weight_sum: float
  count: int
  pending: set[TaskHandle]
  closed: bool = False


class FeastScheduler:
  """Synchronous over-selected rounds for the global model, plus per-round straggler windows
  that update the auxiliary model in round order.

  Args:
    cohort_size: B, updates aggregated per round.
    local_work: steps per task.
    weighting: aggregation weights ('uniform' is the paper's unweighted sums).
    num_selected: B_t >= B clients sampled per round.
    tau_max: seconds after a round's start during which its stragglers are folded in.
    update_auxiliary: `auxiliary_update(...)`, applied to the server state per closed window.
    window_close: 'complete' (at tau_max or once every straggler is in) or 'tau_max'.
  """

  def __init__(
    self,
    cohort_size: int,
    local_work: LocalWork,
    weighting: str,
    *,
    num_selected: int | None,
    tau_max: float,
    update_auxiliary: Callable[[FeastState, Params, Params, jax.Array], FeastState],
    window_close: str = 'complete',
  ):
    if not 0 <= tau_max < math.inf:
      raise ValueError(f'algorithm.kwargs.tau_max={tau_max}; allowed: 0 <= tau_max < inf')
    if window_close not in WINDOW_CLOSE_RULES:
      raise ValueError(
        f'algorithm.kwargs.window_close={window_close!r}; allowed: {WINDOW_CLOSE_RULES}'
      )
    self.tau_max = float(tau_max)
    self.close_when_complete = window_close == WindowClose.COMPLETE
    self.weighting = weighting
    self.update_auxiliary = update_auxiliary
    self.rounds = SynchronousScheduler(
      cohort_size,
      local_work,
      weighting,
      num_selected=num_selected,
      late_update_handler=self._late_update,
      round_closing=self._round_closing,
    )
    self._windows: collections.deque[StragglerWindow] = collections.deque()  # round order
    self._open: dict[int, StragglerWindow] = {}
    self._pending_round: dict[TaskHandle, int] = {}
    self.folded = 0  # stragglers folded into some Delta^+
    self.auxiliary_updates = 0  # windows applied to a
    self.window_sizes: list[int] = []  # B_t^+ of each applied window, in round order

  # ---- Scheduler protocol ----------------------------------------------------------------

  def start(self, sim: SchedulerContext) -> None:
    self.rounds.start(sim)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    self.rounds.on_arrival(sim, handle)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    if isinstance(payload, tuple) and payload[0] == _WINDOW_TIMER:
      window = self._open.get(payload[1])
      if window is not None:  # else it already closed with every straggler in
        self._close(sim, window)
      return
    self.rounds.on_timer(sim, payload)

  def on_dropout(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    window = self._window_of(handle)
    if window is not None:
      window.pending.discard(handle)
      if not window.pending and self.close_when_complete:
        self._close(sim, window)
    self.rounds.on_dropout(sim, handle)

  # ---- Algorithm 2 -----------------------------------------------------------------------

  def _window_of(self, handle: TaskHandle) -> StragglerWindow | None:
    round_index = self._pending_round.pop(handle, None)
    return None if round_index is None else self._open.get(round_index)

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    # Line 11: Delta_t^+ starts as the fast clients' Delta_t; w_t is the current model.
    delta_sum, weight_sum = weighted_delta_sum(sim.updates(closing.aggregated, closing.weights))
    window = StragglerWindow(
      closing.index,
      closing.start_time,
      sim.params,
      delta_sum,
      float(weight_sum),
      len(closing.aggregated),
      set(closing.stragglers),
    )
    self._windows.append(window)
    self._open[window.round_index] = window
    for handle in window.pending:
      self._pending_round[handle] = window.round_index
    end = window.start_time + self.tau_max
    if sim.now > end or (not window.pending and self.close_when_complete):
      self._close(sim, window)
    else:
      sim.set_timer(end, (_WINDOW_TIMER, window.round_index))

  def _late_update(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    # Lines 12-15: a straggler within tau_max of its round's start joins Delta_t^+.
    window = self._window_of(handle)
    if window is None or sim.now - window.start_time > self.tau_max:
      sim.discard(handle, BEYOND_TAU_MAX)
    elif handle.num_steps == 0:
      sim.discard(handle, 'no_local_steps')
    else:
      weight = update_weights(sim, [handle], self.weighting)
      delta, weight_sum = weighted_delta_sum(sim.updates([handle], weight))
      window.delta_sum = jax.tree_util.tree_map(jnp.add, window.delta_sum, delta)
      window.weight_sum += float(weight_sum)
      window.count += 1
      sim.fold_in([handle])
      self.folded += 1
    if window is not None:
      window.pending.discard(handle)
      if not window.pending and self.close_when_complete:
        self._close(sim, window)

  def _close(self, sim: SchedulerContext, window: StragglerWindow) -> None:
    window.closed = True
    self._open.pop(window.round_index, None)
    for handle in window.pending:  # still training: they will arrive beyond tau_max
      self._pending_round.pop(handle, None)
    # Lines 16-17, in round order.
    while self._windows and self._windows[0].closed:
      done = self._windows.popleft()

      def update(state: FeastState, window: StragglerWindow = done) -> FeastState:
        return self.update_auxiliary(
          state, window.start_params, window.delta_sum, jnp.float32(window.weight_sum)
        )

      sim.update_server_state(update)
      self.auxiliary_updates += 1
      self.window_sizes.append(done.count)

  def report(self) -> dict[str, Any]:
    """Window figures for the run summary."""
    sizes = self.window_sizes
    return {
      'stragglers_folded': self.folded,
      'auxiliary_updates': self.auxiliary_updates,
      'pending_windows': len(self._windows),
      'mean_window_updates': sum(sizes) / len(sizes) if sizes else 0.0,
    }


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
