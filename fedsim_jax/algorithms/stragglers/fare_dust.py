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

FARe-DUST: Federated Asynchronous Regularization with Distillation Using Stale Teachers.

Hard et al., "Learning from straggler clients in federated learning", Section 2.2, Appendix A
(Algorithm 1, server; Algorithm 3, client; Figure 4); tuned values in Tables 16-17, server
optimizer in Appendix G.3.

Server (Algorithm 1). Each round samples B_t clients (over-selection) and advances the global
model w with the fastest B of them, by FedAdam ("FARe-DUST was used in conjunction with the
FedAdam server optimizer", G.3). The server also keeps `Deltas`, the summed deltas of the last
k rounds with their counts b_t'. A straggler of round t' that reports after its round closed is
summed into Delta_t' (lines 18-19) if round t' is still among the last k, and is discarded with
reason 'expired_from_history' otherwise. Every client of every round gets its own teacher
(lines 6-7): a historical delta drawn uniformly from `Deltas` and applied to the latest weights,

  w_teacher = w_t - (eta_g / b_t') Delta_t'      (the paper's sign: Delta = old - new)
            = w_t + eta_teacher * mean_t'          (this code base: deltas are new - old),

a "mismatched gradient": a stale delta on the current model. The evaluated model is an EMA of
the global weights (Output: EMA_beta(w_1, ..., w_T)).

Client (Algorithm 3): local SGD on F_i + rho * psi_i(w, w_teacher) (Sec. 2.2), where psi is the
distillation loss `client.objective.distillation_loss` between the teacher's and the
student's logits on the client's own batches.

Choices where the paper is silent or inconsistent (settings in `algorithm.kwargs` in brackets
where the choice can change results):
  * [`history_length` = k] Which rounds are in `Deltas`: round t's accumulator enters right
    after round t's main update, holding its B fast updates (count b_t = B); stragglers of
    round t' are added to it while it is among the k most recent rounds. Algorithm 1 line 21
    evicts when |Deltas| > k, so k rounds are kept (Sec. 2.2's {Delta_{t-k}, ..., Delta_t}
    would be k + 1). Line 22 updates a w_{t-k-1} that is never read again: not modelled.
    Clients of round t + 1 may draw round t's accumulator.
  * [`weighting`] Teacher normalisation: mean_t' is the slot's sum of deltas
    weighted by the scheduler's aggregation weights p_c, divided by the sum of those weights.
    With 'uniform' weights (the paper's unweighted sums, as the shipped config uses) this is
    exactly Delta_t' / b_t' of Algorithm 1 line 7 and Figure 4b (b_t' counts fast and
    folded straggler updates); with 'num_examples' it is the example-weighted mean, consistent
    with the main update.
  * [`teacher_learning_rate`] The teacher's step size eta_teacher: None uses the server
    learning rate eta_g, literally line 7. Note that with FedAdam's eta_g (0.003 on EMNIST,
    Table 11) this plain step moves the teacher only 0.003 x a mean delta away from w_t; set
    it (e.g. 1.0 for a FedAvg-sized step) to study larger mismatched steps.
  * [`empty_history`] No history yet (round 0): 'no_distillation' (default; the task trains on
    F_i alone, as `Deltas = {}` has nothing to draw) or 'latest_model' (distil from w_t).
  * [`temperature` = T] Distillation form: T^2 KL(softmax(z_teacher / T) || softmax(z / T)),
    added to the task loss as F + rho psi (Sec. 2.2); T = 1 by default (not stated).
  * [`ema_decay` = beta, `ema_warmup`] EMA: the output EMA_beta(w_1, ..., w_T) of Algorithm 1,
    updated after every server version (`strategy.ema.with_ema`); by default
    ('bias_correction') the beta-weighted mean of w_1..w_t, leaving w_0 out as the output's
    index range does; 'none' starts the EMA at w_0. beta = 0 evaluates w itself.
  * [`server_optimizer`] The main update is FedAdam (G.3) with the server optimizer settings
    (`server_learning_rate` eta_g, `b1`, `b2`, `eps`, `adaptive_form`); other FedOpt server
    optimizers are allowed.
  * History sampling uses its own numpy stream derived from the run seed, so client sampling
    and latencies are those of FedAdam with over-selection on the same seed.
  * With rho = 0 no teachers are built or sent (the objective does not read them).
  * The teacher download is not added to the latency (the paper estimates its effect at "a few
    percent", App. D.1.2).
Stragglers folded into `Deltas` count as aggregated updates (`Simulation.fold_in`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  CohortSettings,
  HeldModels,
  LocalWorkSettings,
  ServerOptimizerSettings,
  ema_warmup_setting,
)
from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import TeacherInputs, Term, regularised_objective
from fedsim_jax.models import Model, Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.settings import decay, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.ema import with_ema
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.server_optimizers import SERVER_OPTIMIZERS
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import (
  WEIGHTINGS,
  AroundRounds,
  ClosingRound,
  SynchronousScheduler,
  update_weights,
)


class EmptyHistory(StrEnum):
  """The teacher while the history is empty (`algorithm.kwargs.empty_history`)."""

  NO_DISTILLATION = 'no_distillation'
  LATEST_MODEL = 'latest_model'


EMPTY_HISTORY_RULES = tuple(rule.value for rule in EmptyHistory)
EXPIRED_REASON = 'expired_from_history'


@jax.jit
def weighted_delta_sum(updates: UpdateBatch) -> tuple[Params, jax.Array]:
  """(sum_k p_k delta_k, sum_k p_k) over an update batch (padding rows have p_k = 0)."""
  total = jax.tree_util.tree_map(
    lambda d: jnp.tensordot(updates.weights, d, axes=1), updates.deltas
  )
  return total, updates.weights.sum()


@jax.jit
def _add(a: Params, b: Params) -> Params:
  return jax.tree_util.tree_map(jnp.add, a, b)


@jax.jit
def stale_teacher(
  params: Params, delta_sum: Params, weight_sum: jax.Array, learning_rate: jax.Array
) -> Params:
  """w_teacher = w_t + eta * delta_sum / weight_sum (Algorithm 1 line 7 with deltas = new - old;
  weight_sum is the count b_t' under uniform weights)."""
  return jax.tree_util.tree_map(lambda p, d: p + learning_rate * d / weight_sum, params, delta_sum)


@dataclasses.dataclass
class HistorySlot:
  """One round's accumulator in `Deltas`.

  Attributes:
    round_index: the round t' whose updates it sums.
    delta_sum: pytree, sum_c p_c Delta^c over its fast and folded straggler updates.
    weight_sum: sum_c p_c (the count b_t' under uniform weights).
    count: b_t', the number of updates summed in.
  """

  round_index: int
  delta_sum: Params
  weight_sum: float
  count: int


class DeltaHistory:
  """`Deltas` of Algorithm 1: the accumulators of the `capacity` (k) most recent rounds.

  Rounds enter in increasing order (`push`); pushing a (k + 1)-th evicts the oldest (line 21).
  Late updates are summed into their round's slot while it is kept (`add`, lines 18-19).
  """

  def __init__(self, capacity: int):
    if capacity < 1:
      raise ValueError(f'algorithm.kwargs.history_length={capacity}; must be >= 1')
    self.capacity = capacity
    self._slots: collections.OrderedDict[int, HistorySlot] = collections.OrderedDict()

  def __len__(self) -> int:
    return len(self._slots)

  @property
  def rounds(self) -> list[int]:
    """Rounds held, oldest first."""
    return list(self._slots)

  def slot(self, round_index: int) -> HistorySlot | None:
    return self._slots.get(round_index)

  def push(
    self, round_index: int, delta_sum: Params, weight_sum: float, count: int
  ) -> HistorySlot | None:
    """Adds round `round_index`'s accumulator; returns the evicted slot, if any."""
    if self._slots and round_index <= next(reversed(self._slots)):
      raise ValueError(f'round {round_index} pushed after round {next(reversed(self._slots))}')
    self._slots[round_index] = HistorySlot(round_index, delta_sum, float(weight_sum), int(count))
    if len(self._slots) > self.capacity:
      return self._slots.popitem(last=False)[1]
    return None

  def add(self, round_index: int, delta: Params, weight: float) -> bool:
    """Sums a late update (already scaled by its weight) of round `round_index` into its slot;
    False when that round is no longer (or was never) held."""
    slot = self._slots.get(round_index)
    if slot is None:
      return False
    slot.delta_sum = _add(slot.delta_sum, delta)
    slot.weight_sum += float(weight)
    slot.count += 1
    return True

  def sample(self, rng: np.random.Generator) -> HistorySlot | None:
    """A slot drawn uniformly (Algorithm 1 line 6), or None when the history is empty."""
    if not self._slots:
      return None
    return list(self._slots.values())[int(rng.integers(len(self._slots)))]


class FareDustScheduler(AroundRounds):
  """Synchronous over-selected rounds (the fastest B of B_t drive the global model) plus the
  history of deltas, late-straggler folding and per-client stale teachers.

  Args:
    cohort_size: B, updates aggregated per round.
    local_work: steps per task.
    weighting: aggregation weights ('uniform' is the paper's unweighted sum).
    num_selected: B_t >= B clients sampled per round.
    history_length: k, rounds kept in `Deltas`.
    teacher_learning_rate: eta in w_teacher = w_t + eta * mean delta.
    distill: whether clients distil (rho > 0); without it no teachers are built.
    empty_history: what a task gets before any round is in the history (EMPTY_HISTORY_RULES).
    rng: the history-sampling stream.
  """

  def __init__(
    self,
    cohort_size: int,
    local_work: LocalWork,
    weighting: str,
    *,
    num_selected: int | None,
    history_length: int,
    teacher_learning_rate: float,
    distill: bool,
    empty_history: str = 'no_distillation',
    rng: np.random.Generator,
  ):
    if empty_history not in EMPTY_HISTORY_RULES:
      raise ValueError(
        f'algorithm.kwargs.empty_history={empty_history!r}; allowed: {EMPTY_HISTORY_RULES}'
      )
    if teacher_learning_rate <= 0:
      raise ValueError(
        f'algorithm.kwargs.teacher_learning_rate={teacher_learning_rate}; must be > 0'
      )
    self.history = DeltaHistory(history_length)
    self.teacher_learning_rate = float(teacher_learning_rate)
    self.empty_history = EmptyHistory(empty_history)
    self.weighting = weighting
    self.rng = rng
    self.rounds = SynchronousScheduler(
      cohort_size,
      local_work,
      weighting,
      num_selected=num_selected,
      late_update_handler=self._late_update,
      task_inputs=self._teacher_inputs if distill else None,
      round_closing=self._round_closing,
    )
    self.folded = 0  # late updates summed into the history
    self.teachers_sent = 0  # tasks dispatched with a historical teacher
    self._teacher_cache: tuple[int, dict[int, TeacherInputs]] = (-1, {})

  # ---- Algorithm 1 -----------------------------------------------------------------------

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    # Lines 10-17: the fast updates form Delta_t (b_t = B); round t joins `Deltas`.
    delta_sum, weight_sum = weighted_delta_sum(sim.updates(closing.aggregated, closing.weights))
    self.history.push(closing.index, delta_sum, float(weight_sum), len(closing.aggregated))

  def _late_update(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    # Lines 18-20: a straggler of round t' is summed into Delta_t' while t' is kept.
    if handle.num_steps == 0:
      sim.discard(handle, 'no_local_steps')
      return
    round_index = handle.metadata['round']
    if self.history.slot(round_index) is None:
      sim.discard(handle, EXPIRED_REASON)
      return
    weight = update_weights(sim, [handle], self.weighting)
    delta, weight_sum = weighted_delta_sum(sim.updates([handle], weight))
    self.history.add(round_index, delta, float(weight_sum))
    sim.fold_in([handle])
    self.folded += 1

  def _teacher_inputs(self, sim: SchedulerContext, client: int) -> TeacherInputs:
    # Lines 6-7: one uniformly drawn historical delta per client, on the latest weights.
    del client
    version, cache = self._teacher_cache
    if version != sim.version:
      cache = {}
      self._teacher_cache = (sim.version, cache)
    slot = self.history.sample(self.rng)
    key = -1 if slot is None else slot.round_index
    if key not in cache:
      if slot is None:
        weight = 1.0 if self.empty_history == EmptyHistory.LATEST_MODEL else 0.0
        cache[key] = TeacherInputs(params=sim.params, weight=np.float32(weight))
      else:
        teacher = stale_teacher(
          sim.params,
          slot.delta_sum,
          np.float32(slot.weight_sum),
          np.float32(self.teacher_learning_rate),
        )
        cache[key] = TeacherInputs(params=teacher, weight=np.float32(1.0))
    if slot is not None:
      self.teachers_sent += 1
    return cache[key]

  def report(self) -> dict[str, Any]:
    """History figures for the run summary."""
    return {
      'history_rounds': len(self.history),
      'late_updates_folded': self.folded,
      'tasks_with_teacher': self.teachers_sent,
    }


def fare_dust_client_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  distillation_strength: float,
  distillation_temperature: float = 1.0,
  proximal_strength: float = 0.0,
) -> ClientUpdate:
  """Algorithm 3: local SGD on F_i + rho * psi_i(w, w_teacher), each task's teacher read from
  its `TeacherInputs` task inputs (`local_update` on `fare_dust_objective`)."""
  objective = fare_dust_objective(
    distillation_strength, distillation_temperature, proximal_strength
  )
  return local_update(model, optimizer, batch_size, objective)


def fare_dust_objective(
  rho: float, temperature: float = 1.0, proximal_strength: float = 0.0
) -> tuple[Term, ...]:
  """F_i (+ the `+ L2 reg.` proximal term) + rho * psi_i(w, w_teacher) with the task's own
  teacher (`distillation(rho, temperature, teacher='task_inputs')`)."""
  return regularised_objective(proximal_strength, rho, temperature, teacher='task_inputs')


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
