"""FedASMU: dynamic staleness-aware aggregation on the server, fresh-model blending on devices.

Liu, Jia, Che, Huo, Ren, Zhou, Dai, Dou, "FedASMU: Efficient Asynchronous Federated Learning with
Dynamic Staleness-aware Model Update" (AAAI 2024). The system
model (periodic trigger, cap, staleness bound) is `strategy/periodic_trigger.py`; the choice of
the fetch epoch l* (Formulas 5-6) is `algorithms/fedasmu/fetch.py`. The trigger settings are
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
(`FedasmuSettings`, fedsim_jax/algorithms/fedasmu/settings.py; defaults in brackets):
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

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.algorithms.fedasmu.settings import (
  FedasmuSettings,
  GradientSign,
  SigmaGradient,
  StaticAlpha,
  XiForm,
)
from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch

# ---- Server: Formulas 1-3 --------------------------------------------------------------------


def weight_polynomial(lam, sigma, iota, version, staleness, settings: FedasmuSettings):
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
  if settings.xi_form == XiForm.APPENDIX:
    d_lambda = 1.0 / (jnp.sqrt(t) * s**sigma)
    d_sigma_exact = -lam * jnp.log(s) * d_lambda
  else:
    root = jnp.sqrt(t * s * sigma)
    d_lambda = 1.0 / root
    d_sigma_exact = -lam / (2.0 * sigma * root)
  xi = lam * d_lambda + iota
  d_sigma = (
    d_sigma_exact if settings.sigma_gradient == SigmaGradient.EXACT else -jnp.log(sigma) * d_lambda
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
  settings: FedasmuSettings,
  client_learning_rate: float,
):
  """The appendix's ∇_λ, ∇_σ, ∇_ι of F(w_o) for one aggregation w_o = (1 - α) w_{o-1} + α w'.

  `client` = w_{o'}^i, `before` = w_{o-1}, `after` = w_o; `num_steps` = 𝓛;
  `client_learning_rate` = η_i (`client.learning_rate`).
  """
  estimate = tree_vdot(
    jax.tree_util.tree_map(jnp.subtract, client, after),
    jax.tree_util.tree_map(jnp.subtract, client, before),
  )
  if settings.gradient_sign == GradientSign.DESCENT:
    estimate = -estimate
  scale = (
    estimate
    / (client_learning_rate * jnp.maximum(jnp.asarray(num_steps, jnp.float32), 1.0))
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


def fedasmu_aggregator(
  num_clients: int,
  settings: FedasmuSettings,
  *,
  dynamic: bool,
  client_learning_rate: float,
) -> Aggregator:
  """Formulas 1-3 (`dynamic`) or the static rule of FedASMU-DA/-0 (`settings.static_alpha`), one
  upload at a time in row order (Alg. 1 lines 12-14). Reads `client_params`, `client_id`,
  `staleness`, `num_steps`. `client_learning_rate` is η_i of the gradient estimate."""
  staleness_fn = settings.staleness_function()  # the static rule's s(t - o)

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
    if dynamic or settings.static_alpha == StaticAlpha.FROZEN:
      controls: tuple[jax.Array | float, jax.Array | float, jax.Array | float] = (
        (lam, sigma, iota) if dynamic else (settings.lambda_0, settings.sigma_0, settings.iota_0)
      )
      _, alpha, d_alpha_d_xi, d_lambda, d_sigma = weight_polynomial(
        *controls, state.version, staleness, settings
      )
    else:
      alpha = settings.alpha * staleness_fn(versions_since)
    params = jax.tree_util.tree_map(
      lambda w, c: jnp.where(real, (1 - alpha) * w + alpha * c, w), state.params, client_params
    )
    if dynamic:  # Formula 3 (see the module docstring for its timing)
      grad_lambda, grad_sigma, grad_iota = control_gradients(
        client_params,
        state.params,
        params,
        num_steps,
        d_alpha_d_xi,
        d_lambda,
        d_sigma,
        settings,
        client_learning_rate,
      )
      new_sigma = sigma - settings.sigma_learning_rate * grad_sigma
      if settings.uses_positive_sigma:
        new_sigma = jnp.maximum(new_sigma, settings.sigma_min)
      lam = jnp.where(real, lam - settings.lambda_learning_rate * grad_lambda, lam)
      sigma = jnp.where(real, new_sigma, sigma)
      iota = jnp.where(real, iota - settings.iota_learning_rate * grad_iota, iota)
      state = dataclasses.replace(
        state,
        lam=state.lam.at[client].set(lam),
        sigma=state.sigma.at[client].set(sigma),
        iota=state.iota.at[client].set(iota),
      )
    state = dataclasses.replace(
      state,
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
