"""Client objectives: loss terms that sum.

An `Objective` is a sequence of terms; `local_update` (client/local_update.py) minimises the sum
of their values, added in objective order, with the local optimizer. A term is a small frozen
object holding its own settings; what it reads beyond the batch and the trained model's logits
it declares (`needs_anchor`, `needs_features`, `reads_task_inputs`), so the engine keeps the
downloaded model, captures representations or hands over the task's inputs only when some term
of the objective asks for them. A term of zero strength is inactive and left out entirely: the
compiled step then has no trace of it.

The terms of this module are the ones every algorithm may use: `cross_entropy()` (the task
loss), `proximal(nu)` (FedProx) and `distillation(rho, T, teacher)` (the straggler paper's
`+ KD reg.` and FARe-DUST's stale teachers). Algorithm-specific terms live with their algorithm:
MOON's `contrastive` (algorithms/moon.py), FedDyn's `dynamic_regulariser` (algorithms/feddyn.py)
and ASO-Fed's `asofed_correction` (algorithms/asofed.py), the one term with state across steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp

from fedsim_jax.models import Model, Params
from fedsim_jax.str_enum import StrEnum, parse


class TermInputs(NamedTuple):
  """What a term's loss may read at one local step.

  Attributes:
    model: the model bundle.
    params: the trained (trainable) parameters: the argument being differentiated.
    logits: the trained model's logits on the batch (train mode for models with state).
    features: its penultimate representation of the batch (`Model.capture_features`), or None
      when no term declares `needs_features`.
    anchor: the downloaded model w_0 (whole params, with the state of models that have it), or
      None when no term declares `needs_anchor`.
    task_inputs: the task's own inputs, or None when no term declares `reads_task_inputs`.
    x, y, weights: the batch (raw inputs, labels, example weights; 0 for padding).
  """

  model: Model
  params: Params
  logits: jax.Array
  features: jax.Array | None
  anchor: Params | None
  task_inputs: Any
  x: jax.Array
  y: jax.Array
  weights: jax.Array


class Term:
  """One part of a client objective: its loss value, and optionally state across steps.

  `__call__` returns the term's value, or a tuple of values that the engine adds to the running
  loss one after the other (so a term keeps the summation order of the formula it implements).
  A term with `carries_state` also keeps a carry through the task's steps (`init_carry`),
  corrects the gradient before the optimizer sees it (`correct`), may scale the optimizer's
  updates (`scale_updates`) and reports its final carry in the task's aux (`carry_aux`).
  """

  @property
  def active(self) -> bool:
    """False for a term of zero strength: the engine drops it (no work, no trace)."""
    return True

  @property
  def needs_anchor(self) -> bool:
    """Reads the downloaded model w_0 (`TermInputs.anchor`)."""
    return False

  @property
  def needs_features(self) -> bool:
    """Reads the trained model's penultimate representation (`TermInputs.features`)."""
    return False

  @property
  def reads_task_inputs(self) -> bool:
    """Its loss reads the task's own inputs (`TermInputs.task_inputs`)."""
    return False

  @property
  def carries_state(self) -> bool:
    """Keeps state across local steps (the hooks below)."""
    return False

  def check(self, model: Model) -> None:
    """Rejects a model the term is not defined for (raises ValueError)."""

  def __call__(self, inputs: TermInputs) -> jax.Array | tuple[jax.Array, ...]:
    return ()

  def init_carry(self, model: Model, start_params: Params, task_inputs: Any) -> Any:
    return None

  def correct(self, grads: Params, carry: Any, task_inputs: Any) -> tuple[Params, Any]:
    """`(direction given to the optimizer, new carry)` from the objective's gradient."""
    return grads, carry

  def scale_updates(self, updates: Params, task_inputs: Any) -> Params:
    return updates

  def carry_aux(self, model: Model, carry: Any, start_params: Params) -> dict[str, Any]:
    return {}


Objective = Sequence[Term]


def squared_distance(a: Params, b: Params) -> jax.Array:
  """||a - b||^2 summed over the leaves of two pytrees of one structure."""
  return cast(
    jax.Array,
    sum(
      jnp.sum(jnp.square(p - q))
      for p, q in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
    ),
  )


@dataclasses.dataclass(frozen=True)
class CrossEntropy(Term):
  """The task loss: the model's weighted softmax cross-entropy on the batch."""

  def __call__(self, inputs: TermInputs) -> jax.Array:
    return inputs.model.cross_entropy(inputs.logits, inputs.y, inputs.weights)


def cross_entropy() -> CrossEntropy:
  return CrossEntropy()


@dataclasses.dataclass(frozen=True)
class Proximal(Term):
  """(nu / 2) ||w - w_0||^2 on the trainable parameters, w_0 the downloaded model: FedProx's
  proximal term (Li et al. 2020), the straggler paper's `+ L2 reg.`, ASO-Fed's local
  constraint."""

  strength: float

  def __post_init__(self):
    if not self.strength >= 0:
      raise ValueError(f'proximal strength={self.strength}; allowed: a number >= 0')

  @property
  def active(self) -> bool:
    return self.strength > 0

  @property
  def needs_anchor(self) -> bool:
    return True

  def __call__(self, inputs: TermInputs) -> jax.Array:
    anchor = inputs.model.split(inputs.anchor)[0]
    return 0.5 * self.strength * squared_distance(inputs.params, anchor)


def proximal(strength: float) -> Proximal:
  return Proximal(strength)


def distillation_loss(
  student_logits: jax.Array, teacher_logits: jax.Array, weights: jax.Array, temperature: float = 1.0
) -> jax.Array:
  """Weighted mean of T^2 KL(softmax(teacher / T) || softmax(student / T)) (Hinton et al.).

  `weights` has the shape of the logits without the class axis (`[B]`, or `[B, T]` per token).
  """
  teacher = jax.nn.softmax(teacher_logits / temperature)
  log_student = jax.nn.log_softmax(student_logits / temperature)
  log_teacher = jax.nn.log_softmax(teacher_logits / temperature)
  per_example = (teacher * (log_teacher - log_student)).sum(-1) * temperature**2
  return (per_example * weights).sum() / jnp.maximum(weights.sum(), 1.0)


class TeacherInputs(NamedTuple):
  """A task's own distillation teacher, passed as its `task_inputs` (FARe-DUST: every client
  of every round gets a different stale teacher; Hard et al., Algorithm 1 lines 6-8).

  Attributes:
    params: the teacher model (same structure as the start params).
    weight: scalar multiplying the distillation term of this task: 1 to distil, 0 for a task
      that has no teacher (e.g. before any historical delta exists).
  """

  params: Params
  weight: jax.Array


class Teacher(StrEnum):
  """Where a distillation term's teacher comes from (`Distillation.teacher`)."""

  DOWNLOADED = 'downloaded'  # the model the client downloaded
  TASK_INPUTS = 'task_inputs'  # each task's own `TeacherInputs`


TEACHER_SOURCES = tuple(teacher.value for teacher in Teacher)


@dataclasses.dataclass(frozen=True)
class Distillation(Term):
  """rho * T^2 KL(p_{w_T}^T || p_w^T) on the batch (`distillation_loss`), the teacher's logits
  taken in eval mode without gradient. The teacher w_T is the downloaded model
  (`teacher='downloaded'`: the straggler paper's `+ KD reg.`) or each task's own
  `TeacherInputs` given as its `task_inputs` (`teacher='task_inputs'`: FARe-DUST's stale
  teachers, Algorithm 3), whose `weight` also multiplies rho. Neither paper states the form;
  this is the standard one, added to the task loss."""

  strength: float
  temperature: float = 1.0
  teacher: str = Teacher.DOWNLOADED  # a `Teacher` or its name, parsed here

  def __post_init__(self):
    if not self.strength >= 0 or not self.temperature > 0:
      raise ValueError(
        f'distillation strength={self.strength}, temperature={self.temperature}; allowed: '
        'strength >= 0, temperature > 0'
      )
    object.__setattr__(self, 'teacher', parse(Teacher, self.teacher, 'teacher'))

  @property
  def active(self) -> bool:
    return self.strength > 0

  @property
  def needs_anchor(self) -> bool:
    return self.teacher is Teacher.DOWNLOADED

  @property
  def reads_task_inputs(self) -> bool:
    return self.teacher is Teacher.TASK_INPUTS

  def __call__(self, inputs: TermInputs) -> jax.Array:
    model = inputs.model
    teacher_params, strength = inputs.anchor, self.strength
    if self.teacher is Teacher.TASK_INPUTS:
      teacher_params = inputs.task_inputs.params
      strength = self.strength * inputs.task_inputs.weight
    teacher_logits = jax.lax.stop_gradient(model.apply(teacher_params, inputs.x))
    return strength * distillation_loss(
      inputs.logits, teacher_logits, model.label_weights(inputs.y, inputs.weights), self.temperature
    )


def distillation(strength: float, temperature: float = 1.0, teacher: str = 'downloaded'):
  return Distillation(strength, temperature, teacher)


def regularised_objective(
  proximal_strength: float = 0.0,
  distillation_strength: float = 0.0,
  distillation_temperature: float = 1.0,
  teacher: str = 'downloaded',
) -> tuple[Term, ...]:
  """CE + (nu / 2) ||w - w_0||^2 + rho * T^2 KL(p_{w_T}^T || p_w^T), in this order, the terms of
  zero strength left out: FedAvg's objective when both are 0 (McMahan et al. 2017)."""
  terms = (
    cross_entropy(),
    proximal(proximal_strength),
    distillation(distillation_strength, distillation_temperature, teacher),
  )
  return tuple(term for term in terms if term.active)
