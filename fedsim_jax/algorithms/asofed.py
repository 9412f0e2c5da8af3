"""ASO-Fed (Chen et al. 2020, Algorithms 1-2): one update at a time, w <- w + (n_k / n) Delta_k;
clients train with a decayed gradient average, a local constraint (lambda / 2)||w - w^t||^2 and
a delay-dependent step size r_k.

ASO-Fed: asynchronous online federated learning (Chen, Ning, Slawski and Rangwala, IEEE
BigData 2020, "Asynchronous Online Federated Learning for Edge Devices with Non-IID Data").

Sources: the paper's server and client algorithms as recalled (its text was not available
here), checked against two public re-implementations, AFL-Lib's
`alg/asofed.py` and the FedOpt project's `ASOFed`, which agree on the server rule, the local
constraint and the decayed-gradient recursion but differ in the details listed below; a FedASMU
baseline (FedASMU, Sec. 5, baselines: "attention mechanism and the average local training
time are exploited to adjust the weights of uploaded models without the consideration of
staleness").

Server (asynchronous, one update at a time): on the arrival of client k's update Delta_k,

  w <- w + (n_k / n) Delta_k          (= w - (n_k / n)(w - w_k) for a fresh update)

with n_k the client's examples and n the federation's: no staleness term.

Client k, on the regularised local loss s_k(w) = F_k(w) + (lambda / 2)||w - w^t||^2
(the "local constraint" to the downloaded w^t), each local step with gradient g = grad s_k(w):

  grad zeta = g - g_prev + h_prev                    (decayed gradient)
  h = beta h_prev + (1 - beta) g                      (decay coefficient beta)
  g_prev <- g
  w <- w - r_k * (optimizer step on grad zeta)        (dynamic step size)
  r_k = max(1, log(mean delay of client k / delay unit))

The client's (h, g_prev) persist across its tasks (an online client keeps its state), and r_k
grows with the client's average delay, so slow clients take larger steps.

Choices where the sources are silent or differ (settings: `algorithm.kwargs` of asofed,
`AsoFedSettings`):
  * Granularity: the recursion runs at every local step (FedOpt's code); AFL-Lib applies it
    once per task to the pseudo-gradient w^t - w_k.
  * `decay_gradient`: which gradient enters h. 'current' (h = beta h + (1 - beta) g, FedOpt's
    code; beta = 0 is then plain SGD) or 'previous' (h = beta h + (1 - beta) g_prev, AFL-Lib's
    reading of the paper's line).
  * `delay_measure`: the delay averaged into r_k. 'training_time' (virtual seconds from download
    to upload; FedASMU's "average local training time") or 'staleness' (server versions between
    download and upload, unitless). The log is natural (FedOpt's code uses log10 of the mean
    gap in versions between a client's downloads). A client's first task has r_k = 1.
  * `delay_unit`: a log of a time depends on its unit, and virtual seconds are only as
    meaningful as the latency model's scale. The paper measures real seconds; `delay_unit`
    (virtual seconds per unit, default 1) states which unit r_k uses, so that a latency model
    scaled by c with `delay_unit` scaled by c gives the same step sizes. Choose it so that a
    typical delay means what the paper's second meant (e.g. the run's time per local epoch).
  * State initialisation: h = g_prev = 0 before a client's first task.
  * Server n: the federation's total examples (the online setting's growing data is not
    modelled: a client's data is fixed).
  * Defaults lambda = 0.01 and beta = 0.5 (AFL-Lib's; the paper's values were not available).
  * Not implemented: the server-side feature-representation learning (as recalled, an
    attention re-weighting of the first layer's weights), whose formula could not be recovered
    from the available sources (neither re-implementation has it); FedOpt's gradient clipping
    (not in the paper).
With lambda = 0, beta = 0 and `dynamic_step_size` off the client is plain SGD and ASO-Fed is
FedAsync's delta form with alpha = 1, constant staleness and example-share weights.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.client import proximal
from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import Proximal, Term, cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import boolean, decay, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy import client_table


class DecayGradient(StrEnum):
  """What the decayed average h accumulates (`algorithm.kwargs.decay_gradient`)."""

  CURRENT = 'current'
  PREVIOUS = 'previous'


class DelayMeasure(StrEnum):
  """How a client's delay is measured (`algorithm.kwargs.delay_measure`)."""

  TRAINING_TIME = 'training_time'
  STALENESS = 'staleness'


DECAY_GRADIENTS = tuple(source.value for source in DecayGradient)
DELAY_MEASURES = tuple(measure.value for measure in DelayMeasure)


class AsoFedInputs(NamedTuple):
  """An ASO-Fed task's `task_inputs`: the client's carried state.

  Attributes:
    h: decayed gradient average (structure of the params; for models with state only the
      trainable part is used, the state part stays 0).
    previous_gradient: g_prev, the gradient of the client's last local step (same structure).
    step_scale: r_k, scalar multiplying the optimizer's steps.
  """

  h: Params
  previous_gradient: Params
  step_scale: jax.Array


def step_scale(mean_delay: float) -> float:
  """r_k = max(1, log(mean delay)) (dynamic learning step size); 1 without a positive delay."""
  return max(1.0, math.log(mean_delay)) if mean_delay > 0 else 1.0


def decayed_gradient(
  gradient: Params,
  previous_gradient: Params,
  h: Params,
  decay: float,
  decay_gradient: str = 'current',
) -> tuple[Params, Params]:
  """`(grad zeta, new h)` of one local step: grad zeta = g - g_prev + h_prev and
  h = beta h_prev + (1 - beta) x, x = g ('current') or g_prev ('previous')."""
  zeta = jax.tree_util.tree_map(lambda g, p, h: g - p + h, gradient, previous_gradient, h)
  source = gradient if decay_gradient == DecayGradient.CURRENT else previous_gradient
  new_h = jax.tree_util.tree_map(lambda h, x: decay * h + (1 - decay) * x, h, source)
  return zeta, new_h


class AsoFedCarry(NamedTuple):
  """What ASO-Fed's client carries from step to step: h and g_prev (trainable part)."""

  h: Params
  previous_gradient: Params


@dataclasses.dataclass(frozen=True)
class AsoFedCorrection(Term):
  """ASO-Fed's decayed gradient and dynamic step size (see the module docstring), a term with
  state across steps. grad zeta = g - g_prev + h_prev is the gradient of the rest of the
  objective plus the linear term <h_prev - g_prev, w>; it is added to the gradient rather than
  to the loss, because h is updated from g, the gradient without it (the reported loss is
  then s_k's). The carry (h, g_prev) starts from the task's `AsoFedInputs` and its final value
  is reported in the aux as `h` and `previous_gradient` (state parts 0); the optimizer's updates
  are scaled by `AsoFedInputs.step_scale` (r_k)."""

  decay: float
  decay_gradient: str = 'current'

  def __post_init__(self):
    if not 0 <= self.decay < 1:
      raise ValueError(f'algorithm.kwargs.decay={self.decay}; allowed: 0 <= decay < 1')
    if self.decay_gradient not in DECAY_GRADIENTS:
      raise ValueError(
        f'algorithm.kwargs.decay_gradient={self.decay_gradient!r}; allowed: {DECAY_GRADIENTS}'
      )

  @property
  def carries_state(self) -> bool:
    return True

  def init_carry(self, model: Model, start_params: Params, inputs: AsoFedInputs) -> AsoFedCarry:
    return AsoFedCarry(
      h=model.split(inputs.h)[0], previous_gradient=model.split(inputs.previous_gradient)[0]
    )

  def correct(
    self, grads: Params, carry: AsoFedCarry, inputs: AsoFedInputs
  ) -> tuple[Params, AsoFedCarry]:
    zeta, h = decayed_gradient(
      grads, carry.previous_gradient, carry.h, self.decay, self.decay_gradient
    )
    return zeta, AsoFedCarry(h=h, previous_gradient=grads)

  def scale_updates(self, updates: Params, inputs: AsoFedInputs) -> Params:
    return jax.tree_util.tree_map(lambda u: inputs.step_scale * u, updates)

  def carry_aux(self, model: Model, carry: AsoFedCarry, start_params: Params) -> dict[str, Any]:
    no_state = jax.tree_util.tree_map(jnp.zeros_like, model.split(start_params)[1])
    return {
      'h': model.merge(carry.h, no_state),
      'previous_gradient': model.merge(carry.previous_gradient, no_state),
    }


def asofed_correction(decay: float, decay_gradient: str = 'current') -> AsoFedCorrection:
  return AsoFedCorrection(decay, decay_gradient)


def asofed_client_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  proximal: float,
  decay: float,
  decay_gradient: str = 'current',
) -> ClientUpdate:
  """ASO-Fed's local training (Algorithm 2; see the module docstring): `local_update` on
  `cross_entropy()`, the local constraint `proximal(lambda)` and `asofed_correction`.
  `task_inputs` is the client's `AsoFedInputs`; the returned aux adds the final `h` and
  `previous_gradient` (the state the client keeps for its next task)."""
  objective = (cross_entropy(), Proximal(proximal), asofed_correction(decay, decay_gradient))
  return local_update(model, optimizer, batch_size, objective)


@flax.struct.dataclass
class AsoFedServerState:
  params: Params


def asofed_aggregator(client_sizes: np.ndarray) -> Aggregator:
  """The server update w <- w + (n_k / n) Delta_k, applied to each real row of a batch (a
  buffer of one in ASO-Fed); n_k / n from `client_sizes`, not from the scheduler's weights."""
  sizes = np.asarray(client_sizes, np.float64)
  if sizes.ndim != 1 or sizes.sum() <= 0:
    raise ValueError('client_sizes must be a non-empty 1-D array with a positive sum')
  shares = jnp.asarray(sizes / sizes.sum(), jnp.float32)

  def apply(state: AsoFedServerState, updates: UpdateBatch) -> AsoFedServerState:
    if updates.client_id is None:
      raise ValueError('asofed needs UpdateBatch.client_id (the client of every row)')
    rates = shares[updates.client_id] * updates.mask
    step = jax.tree_util.tree_map(lambda d: jnp.tensordot(rates, d, axes=1), updates.deltas)
    return AsoFedServerState(params=jax.tree_util.tree_map(jnp.add, state.params, step))

  return Aggregator(init=AsoFedServerState, apply=apply)


class AsoFedClients:
  """Host-side state of ASO-Fed's clients: (h, g_prev) after each task and the delays that set
  r_k; the asynchronous scheduler's `client_state` (strategy/client_state.py).

  Args:
    dynamic_step_size: use r_k (else r_k = 1).
    delay_measure: 'training_time' or 'staleness' (DELAY_MEASURES).
    delay_unit: virtual seconds per unit of a 'training_time' delay inside r_k's log.
  """

  def __init__(
    self,
    *,
    dynamic_step_size: bool = True,
    delay_measure: str = 'training_time',
    delay_unit: float = 1.0,
  ):
    if delay_measure not in DELAY_MEASURES:
      raise ValueError(
        f'algorithm.kwargs.delay_measure={delay_measure!r}; allowed: {DELAY_MEASURES}'
      )
    if not delay_unit > 0:
      raise ValueError(f'algorithm.kwargs.delay_unit={delay_unit}; allowed: > 0')
    self.dynamic_step_size = dynamic_step_size
    self.delay_measure = DelayMeasure(delay_measure)
    self.delay_unit = float(delay_unit)
    # Per client: (h, g_prev) after its last task, zeros before (a `ClientTable` of
    # `AsoFedInputs`-shaped pairs, created with the first task), and its delays so far.
    self.states: client_table.ClientTable | None = None
    self.delay_sums: np.ndarray | None = None
    self.delay_counts: np.ndarray | None = None

  def _create(self, sim: SchedulerContext) -> None:
    self.states = client_table.create((sim.params, sim.params), sim.num_clients)
    self.delay_sums = np.zeros(sim.num_clients, np.float64)
    self.delay_counts = np.zeros(sim.num_clients, np.int64)

  def step_scale(self, client: int) -> float:
    if self.delay_counts is None or self.delay_sums is None:
      return 1.0
    count = self.delay_counts[client]
    if not self.dynamic_step_size or count == 0:
      return 1.0
    return step_scale(float(self.delay_sums[client]) / int(count))

  def task_inputs(self, sim: SchedulerContext, client: int) -> AsoFedInputs:
    if self.states is None:
      self._create(sim)
    assert self.states is not None
    h, previous = client_table.read(self.states, client)
    return AsoFedInputs(
      h=h, previous_gradient=previous, step_scale=np.float32(self.step_scale(client))
    )

  def observe_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    """Records the task's delay and, if it trained, the client's new (h, g_prev)."""
    if self.states is None:
      self._create(sim)
    assert self.states is not None and self.delay_sums is not None
    assert self.delay_counts is not None
    if self.delay_measure == DelayMeasure.TRAINING_TIME:
      delay = (handle.arrival_time - handle.dispatch_time) / self.delay_unit
    else:
      delay = sim.version - handle.version
    client = handle.client_id
    self.delay_sums[client] += float(delay)
    self.delay_counts[client] += 1
    if handle.num_steps == 0:
      return
    aux = sim.task_aux(handle)
    self.states = client_table.write(self.states, client, (aux['h'], aux['previous_gradient']))


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
