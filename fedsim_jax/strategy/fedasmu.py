"""FedASMU: dynamic staleness-aware aggregation on the server, fresh-model blending on devices.

Liu, Jia, Che, Huo, Ren, Zhou, Dai, Dou, "FedASMU: Efficient Asynchronous Federated Learning with
Dynamic Staleness-aware Model Update" (AAAI 2024). The system
model (periodic trigger, cap, staleness bound) is `strategy/periodic_trigger.py`; the choice of
the fetch epoch l* (Formulas 5-6) is `strategy/fedasmu_fetch.py`. The trigger settings are
`algorithm.kwargs.trigger_period` (𝒯), `algorithm.kwargs.trigger_count` (m'),
`algorithm.kwargs.trigger_timing` and the cap `algorithm.kwargs.concurrency`, shared with the
asynchronous baselines; τ is `algorithm.kwargs.tau`.

Server (Sec. 4 "Dynamic Model Update on the Server", Alg. 1 lines 7-16, appendix "Details on the
Server"). For an accepted upload w' of device i that downloaded version o, at version t:
  w_{t+1} = (1 - α) w_t + α w'                                        (Formula 1)
  ξ = λ_i / (sqrt(t) (t - o + 1)^σ_i) + ι_i,   α = μ_α ξ / (1 + μ_α ξ)  (Formula 2)
  (λ_i, σ_i, ι_i) <- (λ_i, σ_i, ι_i) - (η_λ, η_σ, η_ι) ∇F(w_o)        (Formula 3)
The appendix's hyper-gradients, with w_{o'}^i the device's upload, w_{o-1} the model it was
aggregated into and w_o the result:
  ∇_λ F(w_o) ≈ μ_α (w_{o'}^i - w_o)·(w_{o'}^i - w_{o-1}) / (η_i 𝓛 (1 + μ_α ξ)^2) ∂ξ/∂λ
and the same with ∂ξ/∂σ, ∂ξ/∂ι = 1: the gradient estimate g_i(w_o) ≈ (w_{o'}^i - w_o) / (η_i 𝓛)
(the appendix's, "no extra communication") dotted with ∂w_o/∂α = w_{o'}^i - w_{o-1}, times ∂α/∂ξ.
Every quantity is known when w_{o'}^i is aggregated, so the aggregator takes the Formula 3 step
right after that aggregation: the device's next upload is weighted with the updated parameters,
exactly as Formula 3 (applied at the next upload, from the gradient of the previous one) would.
Per-device λ, σ, ι are `[num_clients]` arrays in the server state, indexed by
`UpdateBatch.client_id`; the whole update is one jitted scan over the batch's rows.

Device (Sec. 4 "Dynamic Local Model Aggregation", Alg. 2, appendix "Details on the Devices").
After local epoch l* the device requests the global model; if the server has a newer version
g > o it blends it into the local model w_b and trains on from the blend:
  w_a = (1 - β) w_b + β w_g                                          (Formula 7)
  φ = (γ_i / sqrt(g)) (1 - v_i / sqrt(g - o + 1)),  β = μ_β φ / (1 + μ_β φ)  (Formula 8)
  (γ_i, v_i) <- (γ_i, v_i) - (η_γ, η_v) ∇F_i(w_a, ζ)                 (Formula 9)
with ∇_γ F_i = ⟨∇F_i(w_a, ζ), w_g - w_b⟩ ∂β/∂γ (the appendix, whose a/b labels are swapped), on
the mini-batch ζ of the first step after the blend, which is also the step of Formula 4 that
follows (Alg. 2 lines 9-11 then 16). The reward of the fetch policy is the loss on ζ before minus
after the blend (Alg. 2 line 12). With g <= o nothing is sent and training goes on unblended.

In the simulator a task with a fetch is two segments (`Simulation.dispatch(intermediate=True)`,
then `continues=`). Segment 1 runs epochs 1..l* from the downloaded model and ends when the
request reaches the server: download + l* epochs of compute. At that event the server's model is
the one it sends (version g); segment 2 starts from the local model, carries (w_g, γ_i, v_i, g, o)
as its `FetchInputs`, blends in its first step (the client update's prelude `fresh_model_blend`)
and lasts the download of w_g + the remaining epochs + the upload. The task's staleness is counted from o (its first
segment's download). The blend's β, losses and new γ_i, v_i come back in the task's `aux`; the
scheduler reads them when the upload arrives (also when the upload is then discarded as stale:
the device did the work) and keeps γ_i, v_i on the host for the device's next blend.

Choices where the paper is silent or inconsistent, each a field of `algorithm.kwargs`
(`FedasmuSettings`, fedsim_jax/algorithms/fedasmu.py; defaults in brackets):
- `xi_form` ['appendix']: Formula 2 is rendered λ / sqrt(t (t - o + 1) σ) + ι, but the appendix
  differentiates ∂ξ/∂λ = 1 / (sqrt(o - 1) (o - o')^σ), i.e. σ is the exponent of the staleness
  (as in FedAsync's polynomial, which the paper cites as its inspiration). 'printed' is the
  rendered form (σ must stay > 0).
- `sigma_gradient` ['exact']: the appendix prints ∇_σ with ln(σ) and without λ; the derivative
  of the appendix form is -λ ln(t - o + 1) / (sqrt(t) (t - o + 1)^σ), of the printed form
  -λ / (2 σ sqrt(t s σ)). 'exact' uses the chain rule of `xi_form`; 'printed' the appendix's
  ln(σ) expression (appendix form only, σ > 0).
- `gradient_sign` ['printed']: g_i(w_o) ≈ (w_{o'}^i - w_o) / (η_i 𝓛) as printed. Local SGD moves
  against the gradient, so an actual gradient estimate has the opposite sign ('descent'). As
  printed, (w_{o'}^i - w_o)·(w_{o'}^i - w_{o-1}) = (1 - α)||w_{o'}^i - w_{o-1}||^2 >= 0: each
  aggregation lowers λ_i and ι_i a little (a per-device decay of α); 'descent' raises them.
- 𝓛 is the task's number of local steps and η_i `client.learning_rate` (g is a per-step
  gradient).
- `min_version` [1]: Formula 2 divides by sqrt(t), which is 0 at the first aggregation (the
  version starts at 0, Sec. 3); t is replaced by max(t, min_version).
- `alpha_min` [0.001]: α is projected onto [α_min, 1). Formula 2 gives α < 1 whenever
  1 + μ_α ξ > 0; values below α_min and the pole 1 + μ_α ξ <= 0 give α_min. The convergence proof
  assumes α_min <= α <= 1 with α_min > 0. The hyper-gradients are those of the projected α (zero
  where the projection binds).
- β is projected the same way onto [0, 1): φ <= 0 (v_i > sqrt(g - o + 1)) gives β = 0, no blend
  (the proof assumes 0 <= β <= 1); γ_i, v_i then get no update at that blend.
- `sigma_min` [0.001]: with the 'printed' ξ form or σ gradient, σ is kept >= σ_min after each
  step (both need σ > 0).
- Unstated constants: `mu_alpha` [1], `lambda_0` [1], `sigma_0` [0.5: FedAsync's polynomial
  exponent], `iota_0` [0.1: a floor of ξ, so α stays near 0.09 and above as sqrt(t) grows],
  `mu_beta` [1], `gamma_0` [1], `v_0` [1: φ = 0 at g - o + 1 = 1, i.e. no weight on a model
  that is not newer].
- `static_alpha` ['fedasync'], the aggregation of FedASMU-DA and FedASMU-0 (no dynamic
  aggregation): FedASMU-0 is "FedAsync with staleness bound", so the static rule is FedAsync's
  α = `algorithm.kwargs.alpha` s(t - o) with s = `algorithm.kwargs.staleness` (polynomial:
  (t - o + 1)^-a).
  'frozen' is Formula 2 with the initial λ_0, σ_0, ι_0, never updated.
- Local epochs: with `client.local_epochs` = 𝓛 (an integer >= 2 when fetching) the request
  follows the step ceil(l* n_i / B) (the steps covering l* epochs, at most the task's steps - 1);
  with `client.local_steps` = 𝓛 each step is an "epoch" (Formula 4 writes one mini-batch per
  local epoch). A task of a single step cannot fetch.
- Communication: a task's drawn communication time is half download, half upload; the fresh
  model's download is the latency model's `extra_download_time` (device_ratio: the same link)
  or else half the communication time.
- The reward and the fetch policy's update (`FetchPolicy.observe`) are delivered with the upload
  (Q-tables are only read at the device's next trigger; the shared meta model is updated then).
- The blend's losses and Formula 9's gradient use the model's evaluation-mode loss; the local
  optimizer must be plain SGD (Formula 4), since segment 2 starts a new optimizer state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.strategy.fedasmu_fetch import (
  FetchPolicy,
)
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.periodic_trigger import PeriodicTriggerScheduler
from fedsim_jax.strategy.staleness import StalenessFn

XI_FORMS = ('appendix', 'printed')
SIGMA_GRADIENTS = ('exact', 'printed')
GRADIENT_SIGNS = ('printed', 'descent')
STATIC_ALPHAS = ('fedasync', 'frozen')


# ---- Server: Formulas 1-3 --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerSettings:
  """Formulas 1-3's constants and the readings of the module docstring."""

  dynamic: bool = True
  mu_alpha: float = 1.0
  lambda_0: float = 1.0
  sigma_0: float = 0.5
  iota_0: float = 0.1
  lambda_learning_rate: float = 1e-4
  sigma_learning_rate: float = 1e-4
  iota_learning_rate: float = 1e-4
  client_learning_rate: float = 0.005  # η_i of the gradient estimate
  alpha_min: float = 0.001
  min_version: float = 1.0
  sigma_min: float = 0.001
  xi_form: str = 'appendix'
  sigma_gradient: str = 'exact'
  gradient_sign: str = 'printed'
  static_alpha: str = 'fedasync'
  fedasync_alpha: float = 0.6  # static 'fedasync': algorithm.kwargs.alpha
  staleness_fn: StalenessFn | None = None  # static 'fedasync': s(t - o)

  def __post_init__(self):
    for name, value, allowed in (
      ('xi_form', self.xi_form, XI_FORMS),
      ('sigma_gradient', self.sigma_gradient, SIGMA_GRADIENTS),
      ('gradient_sign', self.gradient_sign, GRADIENT_SIGNS),
      ('static_alpha', self.static_alpha, STATIC_ALPHAS),
    ):
      if value not in allowed:
        raise ValueError(f'algorithm.kwargs.{name}={value!r}; allowed: {allowed}')
    if self.sigma_gradient == 'printed' and self.xi_form != 'appendix':
      raise ValueError(
        "algorithm.kwargs.sigma_gradient='printed' needs algorithm.kwargs.xi_form='appendix'"
      )
    for name in ('mu_alpha', 'min_version', 'sigma_min', 'client_learning_rate'):
      if not getattr(self, name) > 0:
        setting = f'algorithm.kwargs.{name}'
        if name == 'client_learning_rate':  # eta_i is the client's, not an algorithm setting
          setting = 'client.learning_rate'
        raise ValueError(f'{setting}={getattr(self, name)!r}; allowed: a number > 0')
    if not 0 < self.alpha_min < 1:
      raise ValueError(f'algorithm.kwargs.alpha_min={self.alpha_min!r}; allowed: 0 < x < 1')
    if self.uses_positive_sigma and not self.sigma_0 >= self.sigma_min:
      raise ValueError(
        f'algorithm.kwargs.sigma_0={self.sigma_0!r}; allowed with the printed xi_form or '
        f'sigma_gradient: a number >= algorithm.kwargs.sigma_min ({self.sigma_min})'
      )
    if not self.dynamic and self.static_alpha == 'fedasync' and self.staleness_fn is None:
      raise ValueError("static_alpha='fedasync' needs staleness_fn (algorithm.kwargs.staleness)")

  @property
  def uses_positive_sigma(self) -> bool:
    return self.xi_form == 'printed' or self.sigma_gradient == 'printed'


def weight_polynomial(lam, sigma, iota, version, staleness, settings: ServerSettings):
  """Formula 2 with its partial derivatives.

  Args:
    lam, sigma, iota: λ_i, σ_i, ι_i.
    version: t, the global version the upload is aggregated into.
    staleness: t - o + 1 (>= 1).

  Returns:
    `(ξ, α, ∂α/∂ξ, ∂ξ/∂λ, ∂ξ/∂σ)`: α projected onto [α_min, 1) and ∂α/∂ξ that of the projected
    α; ∂ξ/∂σ as `settings.sigma_gradient` says (∂ξ/∂ι = 1).
  """
  t = jnp.maximum(jnp.asarray(version, jnp.float32), settings.min_version)
  s = jnp.asarray(staleness, jnp.float32)
  mu = settings.mu_alpha
  if settings.xi_form == 'appendix':
    d_lambda = 1.0 / (jnp.sqrt(t) * s**sigma)
    d_sigma_exact = -lam * jnp.log(s) * d_lambda
  else:
    root = jnp.sqrt(t * s * sigma)
    d_lambda = 1.0 / root
    d_sigma_exact = -lam / (2.0 * sigma * root)
  xi = lam * d_lambda + iota
  d_sigma = (
    d_sigma_exact if settings.sigma_gradient == 'exact' else -jnp.log(sigma) * d_lambda
  )  # the appendix's ln(σ) in place of λ ln(s)
  denominator = 1.0 + mu * xi
  raw = mu * xi / denominator
  inside = (denominator > 0) & (raw >= settings.alpha_min)
  alpha = jnp.where(inside, raw, settings.alpha_min)
  d_alpha_d_xi = jnp.where(inside, mu / jnp.square(denominator), 0.0)
  return xi, alpha, d_alpha_d_xi, d_lambda, d_sigma


def tree_vdot(a: Params, b: Params) -> jax.Array:
  """sum over leaves of <a, b>, computed in float32 whatever the parameters' dtype."""
  return optax.tree_utils.tree_vdot(
    optax.tree_utils.tree_cast(a, jnp.float32), optax.tree_utils.tree_cast(b, jnp.float32)
  )


def control_gradients(
  client: Params,
  before: Params,
  after: Params,
  num_steps,
  d_alpha_d_xi,
  d_lambda,
  d_sigma,
  settings: ServerSettings,
):
  """The appendix's ∇_λ, ∇_σ, ∇_ι of F(w_o) for one aggregation w_o = (1 - α) w_{o-1} + α w'.

  `client` = w_{o'}^i, `before` = w_{o-1}, `after` = w_o; `num_steps` = 𝓛.
  """
  estimate = tree_vdot(
    jax.tree_util.tree_map(jnp.subtract, client, after),
    jax.tree_util.tree_map(jnp.subtract, client, before),
  )
  if settings.gradient_sign == 'descent':
    estimate = -estimate
  scale = (
    estimate
    / (settings.client_learning_rate * jnp.maximum(jnp.asarray(num_steps, jnp.float32), 1.0))
    * d_alpha_d_xi
  )
  return scale * d_lambda, scale * d_sigma, scale


@flax.struct.dataclass
class FedasmuServerState:
  """The global model and each device's control parameters (`[num_clients]` arrays).

  Attributes:
    params: w_t.
    lam, sigma, iota: λ^i, σ^i, ι^i of Formula 2, for the device's next upload.
    version: t, aggregations so far.
    alpha: the α^i last applied to each device's upload (0 before its first).
    aggregations: accepted uploads per device.
  """

  params: Params
  lam: jax.Array
  sigma: jax.Array
  iota: jax.Array
  version: jax.Array
  alpha: jax.Array
  aggregations: jax.Array


def fedasmu_aggregator(num_clients: int, settings: ServerSettings) -> Aggregator:
  """Formulas 1-3 (dynamic) or the static rule of FedASMU-DA/-0, one upload at a time in row
  order (Alg. 1 lines 12-14). Reads `client_params`, `client_id`, `staleness`, `num_steps`."""

  def init(params: Params) -> FedasmuServerState:
    full = lambda value: jnp.full((num_clients,), value, jnp.float32)
    return FedasmuServerState(
      params=params,
      lam=full(settings.lambda_0),
      sigma=full(settings.sigma_0),
      iota=full(settings.iota_0),
      version=jnp.zeros((), jnp.int32),
      alpha=full(0.0),
      aggregations=jnp.zeros((num_clients,), jnp.int32),
    )

  def aggregate_one(state: FedasmuServerState, row) -> tuple[FedasmuServerState, None]:
    client_params, client, versions_since, num_steps, real = row
    staleness = versions_since + 1  # t - o + 1
    lam, sigma, iota = state.lam[client], state.sigma[client], state.iota[client]
    if settings.dynamic or settings.static_alpha == 'frozen':
      if not settings.dynamic:
        lam, sigma, iota = settings.lambda_0, settings.sigma_0, settings.iota_0
      _, alpha, d_alpha_d_xi, d_lambda, d_sigma = weight_polynomial(
        lam, sigma, iota, state.version, staleness, settings
      )
    else:
      alpha = settings.fedasync_alpha * settings.staleness_fn(versions_since)
    params = jax.tree_util.tree_map(
      lambda w, c: jnp.where(real, (1 - alpha) * w + alpha * c, w), state.params, client_params
    )
    if settings.dynamic:  # Formula 3 (see the module docstring for its timing)
      grad_lambda, grad_sigma, grad_iota = control_gradients(
        client_params, state.params, params, num_steps, d_alpha_d_xi, d_lambda, d_sigma, settings
      )
      new_sigma = sigma - settings.sigma_learning_rate * grad_sigma
      if settings.uses_positive_sigma:
        new_sigma = jnp.maximum(new_sigma, settings.sigma_min)
      lam = jnp.where(real, lam - settings.lambda_learning_rate * grad_lambda, lam)
      sigma = jnp.where(real, new_sigma, sigma)
      iota = jnp.where(real, iota - settings.iota_learning_rate * grad_iota, iota)
      state = state.replace(
        lam=state.lam.at[client].set(lam),
        sigma=state.sigma.at[client].set(sigma),
        iota=state.iota.at[client].set(iota),
      )
    state = state.replace(
      params=params,
      version=state.version + real.astype(jnp.int32),
      alpha=state.alpha.at[client].set(jnp.where(real, alpha, state.alpha[client])),
      aggregations=state.aggregations.at[client].add(real.astype(jnp.int32)),
    )
    return state, None

  def apply(state: FedasmuServerState, updates: UpdateBatch) -> FedasmuServerState:
    if updates.client_id is None or updates.client_params is None:
      raise ValueError('fedasmu_aggregator needs client_id and client_params in the UpdateBatch')
    rows = (
      updates.client_params,
      jnp.asarray(updates.client_id, jnp.int32),
      jnp.asarray(updates.staleness, jnp.int32),
      updates.num_steps,
      updates.weights > 0,
    )
    state, _ = jax.lax.scan(aggregate_one, state, rows)
    return state

  return Aggregator(init=init, apply=apply, needs_client_params=True)


# ---- Device: Formulas 7-9 --------------------------------------------------------------------


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

  def __post_init__(self):
    if not self.mu_beta > 0 or self.gamma_learning_rate < 0 or self.v_learning_rate < 0:
      raise ValueError(
        f'algorithm.kwargs.mu_beta={self.mu_beta}, algorithm.kwargs.gamma_learning_rate='
        f'{self.gamma_learning_rate}, algorithm.kwargs.v_learning_rate={self.v_learning_rate}; '
        'allowed: mu_beta > 0, learning rates >= 0'
      )

  def init(self, model: Model, start_params: Params, inputs: FetchInputs) -> BlendRecord:
    zero = jnp.zeros((), jnp.float32)
    return BlendRecord(
      blended=zero,
      beta=zero,
      loss_before=zero,
      loss_after=zero,
      gamma=jnp.asarray(inputs.gamma, jnp.float32),
      v=jnp.asarray(inputs.v, jnp.float32),
    )

  def __call__(
    self,
    model: Model,
    params: Params,
    batch,
    inputs: FetchInputs,
    record: BlendRecord,
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

    first = (steps_run == 0) & (inputs.blend > 0)
    return jax.lax.cond(first, blend, keep, params, batch, inputs, record)

  def aux(self, record: BlendRecord) -> dict[str, jax.Array]:
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


# ---- Scheduler: Alg. 1 (trigger, staleness bound) + Alg. 2's fetch ----------------------------


class FedasmuScheduler(PeriodicTriggerScheduler):
  """The periodic trigger with τ, tasks split at the fetch, per-device γ, v and the rewards.

  Args:
    trigger_period, trigger_count, concurrency, timing: the system model (periodic_trigger.py).
    local_work: 𝓛 as `client.local_steps` (one step per epoch) or integer `client.local_epochs`.
    tau: τ, uploads with t - o + 1 > τ are discarded.
    fetch_policy: chooses l* (None: no fetch, FedASMU-FA and -0).
    gamma_0, v_0: every device's initial γ, v.
  """

  def __init__(
    self,
    trigger_period: float,
    trigger_count: int,
    concurrency: int,
    local_work: LocalWork,
    *,
    tau: int,
    fetch_policy: FetchPolicy | None,
    gamma_0: float = 1.0,
    v_0: float = 1.0,
    timing: str = 'periodic',
  ):
    if not isinstance(tau, int) or tau < 1:
      raise ValueError(f'algorithm.kwargs.tau={tau!r}; allowed: an integer >= 1')
    super().__init__(
      trigger_period,
      trigger_count,
      concurrency,
      1,
      local_work,
      'uniform',
      max_staleness=tau - 1,
      timing=timing,
    )
    if fetch_policy is not None:
      if local_work.time_limit is not None:
        raise ValueError(
          'algorithm.kwargs.time_limit: FedASMU fetches after a local epoch; allowed: '
          'None (set client.local_epochs or client.local_steps)'
        )
      if local_work.steps is None and not (
        float(local_work.epochs).is_integer() and local_work.epochs >= 2
      ):
        raise ValueError(
          f'client.local_epochs={local_work.epochs!r}; allowed with a fetch: an integer >= 2'
        )
      if local_work.steps is not None and local_work.steps < 2:
        raise ValueError(
          f'client.local_steps={local_work.steps!r}; allowed with a fetch: an integer >= 2'
        )
    self.tau = tau
    self.fetch_policy = fetch_policy
    self.gamma_0, self.v_0 = float(gamma_0), float(v_0)
    self.gamma = np.zeros(0, np.float32)  # γ_i, v_i: set at start
    self.v = np.zeros(0, np.float32)
    self.fetches = 0  # fresh-model requests
    self.blends = 0  # requests answered with a newer model (g > o)
    self.rewards: list[float] = []

  @property
  def num_epochs(self) -> int:
    """𝓛 of the fetch policy."""
    if self.local_work.steps is not None:
      return self.local_work.steps
    return int(self.local_work.epochs)

  def start(self, sim: SchedulerContext) -> None:
    self.gamma = np.full(sim.num_clients, self.gamma_0, np.float32)
    self.v = np.full(sim.num_clients, self.v_0, np.float32)
    super().start(sim)

  def _fetch_step(self, num_examples: int, fetch_epoch: int, total_steps: int) -> int:
    """The step after which epoch `fetch_epoch` ends (1..total_steps - 1)."""
    if self.local_work.steps is not None:
      return fetch_epoch
    covered = self.local_work.steps_for_epochs(fetch_epoch, num_examples)
    return max(1, min(covered, total_steps - 1))

  def _inputs(
    self,
    sim: SchedulerContext,
    client: int,
    global_params: Params,
    *,
    blend: bool,
    fresh_version: int = 0,
    download_version: int = 0,
  ) -> FetchInputs:
    return fetch_inputs(
      global_params,
      blend=blend,
      gamma=self.gamma[client],
      v=self.v[client],
      fresh_version=fresh_version,
      download_version=download_version,
    )

  def start_task(self, sim: SchedulerContext, client: int) -> None:
    latency = sim.sample_latency(client)
    num_examples = int(sim.client_sizes[client])
    total = self.local_work.num_steps(num_examples, latency)
    metadata = {'total_steps': total}
    if self.fetch_policy is None:
      sim.dispatch(client, total, latency=latency, metadata=metadata)
      return
    plain = self._inputs(sim, client, sim.params, blend=False)
    if total < 2:  # no step boundary to fetch at
      sim.dispatch(client, total, latency=latency, task_inputs=plain, metadata=metadata)
      return
    fetch_epoch = self.fetch_policy.propose(client, self.num_epochs)  # Alg. 2 line 1
    first = self._fetch_step(num_examples, fetch_epoch, total)
    # Segment 1: download w_o, train epochs 1..l*; it ends when the request reaches the server.
    segment = TaskLatency(
      communication=latency.communication / 2, overhead=latency.overhead, per_step=latency.per_step
    )
    sim.dispatch(
      client,
      first,
      latency=segment,
      task_inputs=plain,
      intermediate=True,
      metadata={**metadata, 'fetch_epoch': fetch_epoch, 'task_latency': latency},
      planned_steps=total,
    )

  def on_segment_end(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    """Alg. 2 lines 4-8: the server answers the request with w_g if g > o."""
    client, latency = handle.client_id, handle.metadata['task_latency']
    fresh_version, download_version = sim.version, handle.version
    fresh = fresh_version > download_version
    local = sim.task_params(handle)
    download = sim.download_time(client, latency) if fresh else 0.0
    segment = TaskLatency(
      communication=download + latency.communication / 2, overhead=0.0, per_step=latency.per_step
    )
    inputs = self._inputs(
      sim,
      client,
      sim.params if fresh else local,
      blend=fresh,
      fresh_version=fresh_version,
      download_version=download_version,
    )
    metadata = {key: value for key, value in handle.metadata.items() if key != 'task_latency'}
    sim.dispatch(
      client,
      metadata['total_steps'] - handle.num_steps,
      latency=segment,
      start_params=local,
      task_inputs=inputs,
      continues=handle,
      metadata={
        **metadata,
        'fresh_version': fresh_version,
        'blended': fresh,
        'fetch_time': sim.now,
      },
    )
    self.fetches += 1
    self.blends += int(fresh)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if handle.metadata.get('blended'):
      # The device's Formula 9 step and Alg. 2 line 12's reward, delivered with the upload.
      aux = sim.task_aux(handle)
      client = handle.client_id
      self.gamma[client] = aux['fetch_gamma']
      self.v[client] = aux['fetch_v']
      reward = float(aux['fetch_loss_before'] - aux['fetch_loss_after'])
      self.rewards.append(reward)
      self.fetch_policy.observe(client, handle.metadata['fetch_epoch'], reward)
    super().on_arrival(sim, handle)

  def aggregate(self, sim: SchedulerContext, buffer: Sequence[TaskHandle]) -> None:
    """Formula 1 with 𝓛 = the whole task's steps (a segmented task's last segment ran fewer)."""
    batch = sim.updates(buffer, [1.0] * len(buffer), with_client_params=None)
    steps = np.zeros(np.shape(batch.num_steps), np.int32)
    steps[: len(buffer)] = [h.metadata['total_steps'] for h in buffer]
    sim.apply_update_batch(batch.replace(num_steps=steps), buffer)

  def report(self) -> dict[str, Any]:
    rewards = np.asarray(self.rewards, np.float64)
    return {
      **super().report(),
      'fetches': self.fetches,
      'blends': self.blends,
      'mean_reward': float(rewards.mean()) if rewards.size else None,
      'mean_gamma': float(self.gamma.mean()) if self.gamma.size else None,
      'mean_v': float(self.v.mean()) if self.v.size else None,
    }
