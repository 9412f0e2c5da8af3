"""FedASMU's devices: the fresh-model blend of Formulas 7-9 (Alg. 2, the appendix's
"Details on the Devices"), the segment inputs it reads and the client update (see server.py's
docstring for the paper's formulas and the readings)."""

import dataclasses
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.algorithms.fedasmu.server import tree_vdot
from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import cross_entropy
from fedsim_jax.models import Model, Params


def fetch_beta(gamma, v, fresh_version, download_version, mu_beta: float):
  """Formula 8: `(φ, β)` with β projected onto [0, 1) (β = 0 where φ <= 0)."""
  g = jnp.asarray(fresh_version, jnp.float32)
  gap = g - jnp.asarray(download_version, jnp.float32) + 1.0  # g - o + 1
  phi = gamma / jnp.sqrt(g) * (1.0 - v / jnp.sqrt(gap))
  beta = jnp.where(phi > 0, mu_beta * phi / (1.0 + mu_beta * phi), 0.0)
  return phi, beta


def blend_gradients(loss_slope, phi, gamma, v, fresh_version, download_version, mu_beta: float):
  """The appendix's ∇_γ, ∇_v of F_i(w_a, ζ), given `loss_slope` = ∂F_i/∂β =
  <∇F_i(w_a, ζ), w_g - w_b> (zero where β is projected to 0)."""
  g = jnp.asarray(fresh_version, jnp.float32)
  gap = g - jnp.asarray(download_version, jnp.float32) + 1.0
  d_beta_d_phi = jnp.where(phi > 0, mu_beta / jnp.square(1.0 + mu_beta * phi), 0.0)
  common = loss_slope * d_beta_d_phi / jnp.sqrt(g)
  return common * (1.0 - v / jnp.sqrt(gap)), common * (-gamma / jnp.sqrt(gap))


class FetchInputs(NamedTuple):
  """A FedASMU task's `task_inputs` (every task of a fetching run carries one).

  Attributes:
    global_params: w_g (any model of the same structure when `blend` is 0).
    blend: 1.0 to blend w_g in at the segment's first step, else 0.0.
    gamma, v: the device's γ_i, v_i.
    fresh_version, download_version: g and o.
  """

  global_params: Params
  blend: Any
  gamma: Any
  v: Any
  fresh_version: Any
  download_version: Any


def fetch_inputs(
  global_params: Params,
  *,
  blend: bool,
  gamma: float,
  v: float,
  fresh_version: int,
  download_version: int,
) -> FetchInputs:
  f32 = np.float32
  return FetchInputs(
    global_params=global_params,
    blend=f32(blend),
    gamma=f32(gamma),
    v=f32(v),
    fresh_version=f32(fresh_version),
    download_version=f32(download_version),
  )


@flax.struct.dataclass
class BlendRecord:
  """What the blend of a segment did (zeros and the incoming γ, v when it did not blend)."""

  blended: jax.Array
  beta: jax.Array
  loss_before: jax.Array
  loss_after: jax.Array
  gamma: jax.Array
  v: jax.Array


@dataclasses.dataclass(frozen=True)
class FreshModelBlend:
  """The device's blend of Formulas 7-9 as a `local_update` prelude.

  At the first step of a segment whose `FetchInputs.blend` is 1 it runs on that step's
  mini-batch ζ: loss on ζ before (at w_b) and after (at w_a), Formula 9's step for γ, v from
  ∇F_i(w_a, ζ); the step then goes on from w_a (Formula 4). Its state is the segment's
  `BlendRecord`, reported in the aux as `fetch_blended`, `fetch_beta`, `fetch_loss_before`,
  `fetch_loss_after`, `fetch_gamma`, `fetch_v` (the updated γ, v). Under the vmap backend the
  blend's branch is evaluated for every task and step (a select), which costs about one forward
  and one backward pass per step; the loop backends branch.
  """

  mu_beta: float
  gamma_learning_rate: float
  v_learning_rate: float

  def init(self, model: Model, start_params: Params, task_inputs: FetchInputs) -> BlendRecord:
    zero = jnp.zeros((), jnp.float32)
    return BlendRecord(
      blended=zero,
      beta=zero,
      loss_before=zero,
      loss_after=zero,
      gamma=jnp.asarray(task_inputs.gamma, jnp.float32),
      v=jnp.asarray(task_inputs.v, jnp.float32),
    )

  def __call__(
    self,
    model: Model,
    params: Params,
    batch,
    task_inputs: FetchInputs,
    state: BlendRecord,
    steps_run: jax.Array,
  ) -> tuple[Params, BlendRecord]:
    mu_beta = self.mu_beta

    def blend(params: Params, batch, inputs: FetchInputs, record: BlendRecord):
      x, y, weights = batch
      phi, beta = fetch_beta(
        inputs.gamma, inputs.v, inputs.fresh_version, inputs.download_version, mu_beta
      )
      blended = jax.tree_util.tree_map(
        lambda b, g: (1 - beta) * b + beta * g, params, inputs.global_params
      )  # Formula 7
      loss_before = model.loss(params, x, y, weights)
      loss_after, gradient = jax.value_and_grad(model.loss)(blended, x, y, weights)
      slope = tree_vdot(
        gradient, jax.tree_util.tree_map(jnp.subtract, inputs.global_params, params)
      )
      grad_gamma, grad_v = blend_gradients(
        slope, phi, inputs.gamma, inputs.v, inputs.fresh_version, inputs.download_version, mu_beta
      )
      record = BlendRecord(
        blended=jnp.ones((), jnp.float32),
        beta=beta,
        loss_before=loss_before,
        loss_after=loss_after,
        gamma=inputs.gamma - self.gamma_learning_rate * grad_gamma,  # Formula 9
        v=inputs.v - self.v_learning_rate * grad_v,
      )
      return blended, record

    def keep(params: Params, batch, inputs: FetchInputs, record: BlendRecord):
      del batch, inputs
      return params, record

    first = (steps_run == 0) & (task_inputs.blend > 0)
    return jax.lax.cond(first, blend, keep, params, batch, task_inputs, state)

  def aux(self, state: BlendRecord) -> dict[str, jax.Array]:
    record = state
    return {
      'fetch_blended': record.blended,
      'fetch_beta': record.beta,
      'fetch_loss_before': record.loss_before,
      'fetch_loss_after': record.loss_after,
      'fetch_gamma': record.gamma,
      'fetch_v': record.v,
    }


def fresh_model_blend(
  mu_beta: float, gamma_learning_rate: float, v_learning_rate: float
) -> FreshModelBlend:
  return FreshModelBlend(mu_beta, gamma_learning_rate, v_learning_rate)


def fedasmu_client_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  mu_beta: float,
  gamma_learning_rate: float,
  v_learning_rate: float,
) -> ClientUpdate:
  """Formula 4 local SGD (`cross_entropy()` alone) whose segments may start with the blend of
  Formulas 7-9 (the prelude `fresh_model_blend`)."""
  prelude = fresh_model_blend(mu_beta, gamma_learning_rate, v_learning_rate)
  return local_update(model, optimizer, batch_size, (cross_entropy(),), prelude=prelude)
