"""The local-update engine and its client objectives: each term's value and gradient on a tiny
hand-computable model, the engine against the client steps it replaced (bit for bit where the
summation order is the same), and absent terms leaving the compiled step untouched."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.algorithms.asofed import AsoFedInputs, asofed_correction
from fedsim_jax.algorithms.fedasmu.device import fedasmu_client_update, fetch_beta, fetch_inputs
from fedsim_jax.algorithms.feddyn import FedDynInputs, dynamic_regulariser, feddyn_client_update
from fedsim_jax.algorithms.moon import MoonInputs, contrastive, contrastive_loss, moon_client_update
from fedsim_jax.algorithms.stragglers.fare_dust import fare_dust_client_update
from fedsim_jax.client import (
  ClientOptimizer,
  Teacher,
  TeacherInputs,
  TermInputs,
  client_optimizer,
  cross_entropy,
  distillation,
  distillation_loss,
  local_update,
  proximal,
  regularised_objective,
  sgd_client_update,
)
from fedsim_jax.data import toy_federation
from fedsim_jax.models import Model, get_model


class _Linear(nn.Module):
  """logits = x W (W: 2 x 2, no bias)."""

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2, use_bias=False)(x)


class _TwoLayer(nn.Module):
  """z = x W_1 (the features), logits = z W_2."""

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2, use_bias=False, name='out')(nn.Dense(2, use_bias=False, name='hidden')(x))


class _Normed(nn.Module):
  """Dense -> BatchNorm -> ReLU -> Dense: a model with state (running statistics)."""

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    x = nn.Dense(5)(x.reshape((x.shape[0], -1)))
    mask = None if mask is None else mask[:, None]
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x, mask=mask)
    return nn.Dense(4)(nn.relu(x))


LINEAR = Model('linear', _Linear(), input_shape=(2,), num_classes=2)
TWO_LAYER = Model('two_layer', _TwoLayer(), input_shape=(2,), num_classes=2)
FED = toy_federation(num_clients=4, min_size=6, max_size=10)
NORMED = Model(
  'normed', _Normed(), FED.input_shape, FED.num_classes, state_collections=('batch_stats',)
)
LR = 0.2


def _kernel(values):
  return {'Dense_0': {'kernel': jnp.asarray(values, jnp.float32)}}


def _value_and_grad(term, model, params, x, y, weights, anchor=None, task_inputs=None):
  """The term's value (its summands added) and gradient in the trained params."""
  x, y, weights = (jnp.asarray(a) for a in (x, y, weights))

  def value(p):
    if term.needs_features:
      logits, features = model.capture_features(model.apply, p, x)
    else:
      logits, features = model.apply(p, x), None
    out = term(TermInputs(model, p, logits, features, anchor, task_inputs, x, y, weights))
    return sum(out) if isinstance(out, tuple) else out

  return jax.value_and_grad(value)(params)


def _close(a, b, **kwargs):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kwargs)


def _equal(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---- Each term on a hand-computable case -----------------------------------------------------

X2 = np.array([[1.0, 2.0], [3.0, 0.0]], np.float32)


class TestTerms:
  def test_cross_entropy(self):
    # W = 0: logits 0, softmax (1/2, 1/2), CE = log 2; dCE/dlogits = (p - onehot) / 2.
    value, grad = _value_and_grad(
      cross_entropy(), LINEAR, _kernel(np.zeros((2, 2))), X2, [0, 1], [1.0, 1.0]
    )
    assert float(value) == pytest.approx(math.log(2), rel=1e-6)
    # x^T dlogits = [[1, 3], [2, 0]] [[-1/4, 1/4], [1/4, -1/4]]
    _close(grad, _kernel([[0.5, -0.5], [-0.5, 0.5]]), rtol=1e-6)
    # A zero-weight example does not count.
    value, grad = _value_and_grad(
      cross_entropy(), LINEAR, _kernel(np.zeros((2, 2))), X2, [0, 1], [1.0, 0.0]
    )
    assert float(value) == pytest.approx(math.log(2), rel=1e-6)
    _close(grad, _kernel([[-0.5, 0.5], [-1.0, 1.0]]), rtol=1e-6)

  def test_proximal(self):
    # (nu / 2) ||W - W_0||^2 = 0.25 * (1 + 0 + 4 + 9) = 3.5; gradient nu (W - W_0).
    w, w0 = _kernel([[1.0, 2.0], [3.0, 4.0]]), _kernel([[0.0, 2.0], [1.0, 1.0]])
    term = proximal(0.5)
    assert term.needs_anchor and term.active and not proximal(0.0).active
    value, grad = _value_and_grad(term, LINEAR, w, X2, [0, 1], [1.0, 1.0], anchor=w0)
    assert float(value) == pytest.approx(3.5, rel=1e-6)
    _close(grad, _kernel([[0.5, 0.0], [1.0, 1.5]]), rtol=1e-6)
    with pytest.raises(ValueError, match='proximal'):
      proximal(-1.0)

  def test_proximal_reads_only_the_trainable_part_of_the_anchor(self):
    params = NORMED.init(jax.random.PRNGKey(0))
    anchor = jax.tree_util.tree_map(lambda p: p + 1.0, params)
    x = FED.client_examples(0)[0][:3]
    trainable = NORMED.split(params)[0]
    inputs = TermInputs(NORMED, trainable, None, None, anchor, None, x, None, None)
    size = sum(p.size for p in jax.tree_util.tree_leaves(trainable))
    assert float(proximal(2.0)(inputs)) == pytest.approx(size, rel=1e-6)  # 0.5 * 2 * size * 1^2

  def test_distillation_from_the_downloaded_model(self):
    # Student W = 0: q = (1/2, 1/2). Teacher logits (2 ln 3, 0), T = 2: p = (3/4, 1/4).
    # Value rho T^2 KL(p || q); d/dlogits = rho T (q - p) = rho (-1/2, 1/2).
    rho, temperature = 0.3, 2.0
    teacher = _kernel([[2 * math.log(3), 0.0], [0.0, 0.0]])
    x = [[1.0, 0.0]]
    term = distillation(rho, temperature)
    assert term.needs_anchor and not term.reads_task_inputs
    value, grad = _value_and_grad(
      term, LINEAR, _kernel(np.zeros((2, 2))), x, [0], [1.0], anchor=teacher
    )
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert float(value) == pytest.approx(rho * temperature**2 * kl, rel=1e-5)
    _close(grad, _kernel([[-0.5 * rho, 0.5 * rho], [0.0, 0.0]]), rtol=1e-5, atol=1e-7)
    # The student equal to the teacher: zero loss and gradient.
    value, grad = _value_and_grad(term, LINEAR, teacher, x, [0], [1.0], anchor=teacher)
    assert abs(float(value)) < 1e-6
    _close(grad, _kernel(np.zeros((2, 2))), atol=1e-6)

  def test_distillation_from_the_tasks_teacher_is_weighted(self):
    rho, temperature = 0.3, 2.0
    teacher = _kernel([[2 * math.log(3), 0.0], [0.0, 0.0]])
    own = distillation(rho, temperature, teacher='task_inputs')
    assert own.reads_task_inputs and not own.needs_anchor
    downloaded = _value_and_grad(
      distillation(rho, temperature),
      LINEAR,
      _kernel(np.zeros((2, 2))),
      [[1.0, 0.0]],
      [0],
      [1.0],
      anchor=teacher,
    )
    half = _value_and_grad(
      own,
      LINEAR,
      _kernel(np.zeros((2, 2))),
      [[1.0, 0.0]],
      [0],
      [1.0],
      task_inputs=TeacherInputs(teacher, np.float32(0.5)),
    )
    assert float(half[0]) == pytest.approx(0.5 * float(downloaded[0]), rel=1e-6)
    _close(half[1], jax.tree_util.tree_map(lambda g: 0.5 * g, downloaded[1]), rtol=1e-6)
    with pytest.raises(ValueError, match='teacher'):
      distillation(0.1, teacher='peer')

  def test_contrastive(self):
    # z = x W_1 with x = (1, 0): the trained model's z = (1, 0), the global one's (1, 1), the
    # previous one's (0, 1): cos 1/sqrt 2 and 0, tau = 0.5 -> l_con = log(1 + e^{-sqrt 2}).
    def params(hidden):
      return {
        'hidden': {'kernel': jnp.asarray(hidden, jnp.float32)},
        'out': {'kernel': jnp.eye(2, dtype=jnp.float32)},
      }

    trained = params([[1.0, 0.0], [0.0, 1.0]])
    anchor, previous = params([[1.0, 1.0], [0.0, 0.0]]), params([[0.0, 1.0], [0.0, 0.0]])
    term = contrastive(2.0, 0.5)
    assert term.needs_anchor and term.needs_features and term.reads_task_inputs
    x = np.array([[1.0, 0.0]], np.float32)
    value, grad = _value_and_grad(
      term, TWO_LAYER, trained, x, [0], [1.0], anchor=anchor, task_inputs=MoonInputs(previous)
    )
    assert float(value) == pytest.approx(2.0 * math.log(1 + math.exp(-math.sqrt(2))), rel=1e-6)
    # The gradient against central differences of the value in each hidden weight.
    for i in range(2):
      for j in range(2):
        bump = np.zeros((2, 2), np.float32)
        bump[i, j] = 1e-2
        up, down = (
          _value_and_grad(
            term,
            TWO_LAYER,
            params(np.asarray(trained['hidden']['kernel']) + s * bump),
            x,
            [0],
            [1.0],
            anchor=anchor,
            task_inputs=MoonInputs(previous),
          )[0]
          for s in (1, -1)
        )
        numeric = (float(up) - float(down)) / 2e-2
        assert float(grad['hidden']['kernel'][i, j]) == pytest.approx(numeric, abs=2e-3)
    # The previous model equal to the global one: mu log 2 and no gradient.
    value, grad = _value_and_grad(
      term, TWO_LAYER, trained, x, [0], [1.0], anchor=anchor, task_inputs=MoonInputs(anchor)
    )
    assert float(value) == pytest.approx(2.0 * math.log(2), rel=1e-6)
    _close(grad, jax.tree_util.tree_map(jnp.zeros_like, grad), atol=1e-6)
    assert not contrastive(0.0, 0.5).active

  def test_dynamic_regulariser(self):
    # -<g, W> + (alpha / 2) ||W - W_0||^2 = -0.5 * 10 + 0.25 * 14 = -1.5;
    # gradient -g + alpha (W - W_0).
    w, w0 = _kernel([[1.0, 2.0], [3.0, 4.0]]), _kernel([[0.0, 2.0], [1.0, 1.0]])
    g = _kernel(np.full((2, 2), 0.5))
    value, grad = _value_and_grad(
      dynamic_regulariser(0.5),
      LINEAR,
      w,
      X2,
      [0, 1],
      [1.0, 1.0],
      anchor=w0,
      task_inputs=FedDynInputs(g),
    )
    assert float(value) == pytest.approx(-1.5, rel=1e-6)
    _close(grad, _kernel([[0.0, -0.5], [0.5, 1.0]]), rtol=1e-6)
    with pytest.raises(ValueError, match='BatchNorm'):
      local_update(NORMED, optax.sgd(LR), 4, (cross_entropy(), dynamic_regulariser(0.5)))

  @pytest.mark.parametrize('decay_gradient,h', [('current', 0.3), ('previous', 0.15)])
  def test_asofed_correction(self, decay_gradient, h):
    # zeta = g - g_prev + h_prev = 0.4 - 0.1 + 0.2; h = 0.5 h_prev + 0.5 (g or g_prev).
    term = asofed_correction(0.5, decay_gradient)
    full = lambda v: _kernel(np.full((2, 2), v))  # noqa: E731
    inputs = AsoFedInputs(h=full(0.2), previous_gradient=full(0.1), step_scale=np.float32(3.0))
    assert term.carries_state and term(None) == ()  # no loss value: it corrects the gradient
    carry = term.init_carry(LINEAR, full(0.0), inputs)
    zeta, carry = term.correct(full(0.4), carry, inputs)
    _close(zeta, full(0.5), rtol=1e-6)
    _close(carry.h, full(h), rtol=1e-6)
    _close(carry.previous_gradient, full(0.4), rtol=1e-6)
    _close(term.scale_updates(full(0.1), inputs), full(0.3), rtol=1e-6)
    aux = term.carry_aux(LINEAR, carry, full(0.0))
    _close((aux['h'], aux['previous_gradient']), (full(h), full(0.4)), rtol=1e-6)


# ---- The engine ------------------------------------------------------------------------------


def _batches(num=3):
  """`num` batches of 4 examples from different clients; the last example of every batch but
  the first is padding (weight 0)."""
  out = []
  for step, key in enumerate(jax.random.split(jax.random.PRNGKey(4), num)):
    rows = np.asarray(jax.random.choice(key, 6, (4,), replace=False))
    x, y = FED.client_examples(step % FED.num_clients)
    weights = jnp.ones(4).at[3].set(float(step == 0))
    out.append((jnp.asarray(x[rows]), jnp.asarray(y[rows]), weights))
  return out


def _run_engine(update, start, batches, task_inputs=None):
  # Everything a task varies in is an argument of the program (as under the executor), so that
  # XLA folds the same constants in the engine and in the references.
  @jax.jit
  def run(start, batches, task_inputs):
    state = update.init(start, task_inputs)
    for batch in batches:
      state = update.step(state, batch, task_inputs)
    return update.final(state, start)

  return run(start, batches, task_inputs)


def _run_reference(step, start, batches, opt_state, extra=None):
  """`step(params, opt_state, batch, extra) -> (params, opt_state)` over the batches, jitted;
  `extra` (a pytree) reaches every step as an argument of the program."""

  @jax.jit
  def run(start, batches, opt_state, extra):
    params = start
    for batch in batches:
      params, opt_state = step(params, opt_state, batch, extra)
    return jax.tree_util.tree_map(jnp.subtract, params, start)

  return run(start, batches, opt_state, extra)


def _sgd_reference(optimizer, objective):
  """A step of a params-only model as the client updates before the engine took it:
  `optimizer` on `value_and_grad(objective)(params, extra, x, y, weights)`."""

  def step(params, opt_state, batch, extra):
    _, grads = jax.value_and_grad(objective)(params, extra, *batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  return step


def _mlp():
  return get_model('mlp', FED.input_shape, FED.num_classes, hidden_sizes=(6,))


@pytest.mark.parametrize('momentum', [None, 0.9])
def test_cross_entropy_alone_is_the_fedavg_step_exactly(momentum):
  model, optimizer = _mlp(), optax.sgd(LR, momentum=momentum)
  start = model.init(jax.random.PRNGKey(0))
  batches = _batches()
  delta, aux = _run_engine(local_update(model, optimizer, 4, (cross_entropy(),)), start, batches)
  plain = lambda params, extra, x, y, weights: model.loss(params, x, y, weights)  # noqa: E731
  _equal(
    delta, _run_reference(_sgd_reference(optimizer, plain), start, batches, optimizer.init(start))
  )
  assert int(aux['steps_run']) == 3


def test_cross_entropy_alone_is_the_fedavg_step_exactly_with_batchnorm():
  optimizer = optax.sgd(LR, momentum=0.9)
  start = NORMED.init(jax.random.PRNGKey(0))
  batches = _batches()

  def step(params, opt_state, batch, extra):
    # The BatchNorm rule: train mode, the optimizer on the trainable part, statistics replaced.
    trainable, model_state = NORMED.split(params)
    (_, new_state), grads = jax.value_and_grad(
      lambda t: NORMED.train_loss(NORMED.merge(t, model_state), *batch), has_aux=True
    )(trainable)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    return NORMED.merge(optax.apply_updates(trainable, updates), new_state), opt_state

  delta, _ = _run_engine(local_update(NORMED, optimizer, 4, (cross_entropy(),)), start, batches)
  _equal(delta, _run_reference(step, start, batches, optimizer.init(NORMED.split(start)[0])))
  assert float(jnp.abs(delta['batch_stats']['BatchNorm_0']['mean']).max()) > 0


def test_absent_terms_leave_the_compiled_step_unchanged():
  model = _mlp()
  start = model.init(jax.random.PRNGKey(0))
  batch = _batches(1)[0]
  plain = local_update(model, optax.sgd(LR), 4, (cross_entropy(),))
  zeros = local_update(
    model,
    optax.sgd(LR),
    4,
    (cross_entropy(), proximal(0.0), distillation(0.0, 2.0), contrastive(0.0, 0.5)),
  )
  assert zeros.init(start, None).anchor is None
  assert regularised_objective(0.0, 0.0) == (cross_entropy(),)

  def program(update):
    return str(jax.make_jaxpr(lambda s: update.step(s, batch, None))(update.init(start, None)))

  assert program(zeros) == program(plain)
  # A present term is in the program, with the downloaded model in the state.
  prox = local_update(model, optax.sgd(LR), 4, (cross_entropy(), proximal(0.1)))
  assert prox.init(start, None).anchor is start
  assert program(prox) != program(plain)
  with pytest.raises(ValueError, match='no active term'):
    local_update(model, optax.sgd(LR), 4, (proximal(0.0),))


# ---- The composed objectives against the client steps they replaced ---------------------------


def _two_starts(model):
  return model.init(jax.random.PRNGKey(0)), model.init(jax.random.PRNGKey(5))


def _tree_sum(fn, a, b):
  return sum(fn(p, q) for p, q in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def test_moon_matches_its_former_step():
  model, mu, tau, sgd = _mlp(), 2.0, 0.5, optax.sgd(LR)
  start, previous = _two_starts(model)
  batches = _batches()

  def objective(params, extra, x, y, weights):  # MOON's former objective
    anchor, previous = extra
    (logits, _), z = model.capture_features(lambda p, i: (model.apply(p, i), {}), params, x)
    z_global = jax.lax.stop_gradient(model.features(anchor, x))
    z_previous = jax.lax.stop_gradient(model.features(previous, x))
    return model.cross_entropy(logits, y, weights) + mu * contrastive_loss(
      z, z_global, z_previous, tau, weights
    )

  update = moon_client_update(model, sgd, 4, mu=mu, temperature=tau)
  delta, _ = _run_engine(update, start, batches, MoonInputs(previous))
  expected = _run_reference(
    _sgd_reference(sgd, objective), start, batches, sgd.init(start), (start, previous)
  )
  _equal(delta, expected)


@pytest.mark.parametrize('proximal_strength', [0.0, 0.3])
def test_fare_dust_matches_its_former_step(proximal_strength):
  model, rho, temperature, sgd = _mlp(), 0.5, 2.0, optax.sgd(LR)
  start, teacher_params = _two_starts(model)
  teacher = TeacherInputs(teacher_params, np.float32(0.7))
  batches = _batches()

  def objective(params, extra, x, y, weights):  # sgd_client_update's former objective
    anchor, teacher = extra
    logits = model.apply(params, x)
    loss = model.cross_entropy(logits, y, weights)
    if proximal_strength:
      sq = _tree_sum(lambda p, a: jnp.sum(jnp.square(p - a)), params, anchor)
      loss = loss + 0.5 * proximal_strength * sq
    teacher_logits = jax.lax.stop_gradient(model.apply(teacher.params, x))
    return loss + rho * teacher.weight * distillation_loss(
      logits, teacher_logits, weights, temperature
    )

  update = fare_dust_client_update(
    model,
    sgd,
    4,
    distillation_strength=rho,
    distillation_temperature=temperature,
    proximal_strength=proximal_strength,
  )
  delta, _ = _run_engine(update, start, batches, teacher)
  expected = _run_reference(
    _sgd_reference(sgd, objective), start, batches, sgd.init(start), (start, teacher)
  )
  _equal(delta, expected)


def test_feddyn_matches_its_former_step_up_to_the_gradient_summation_order():
  model, alpha, sgd = _mlp(), 0.3, optax.sgd(LR)
  start, _ = _two_starts(model)
  gradient = jax.tree_util.tree_map(
    lambda p: 0.1 * jax.random.normal(jax.random.PRNGKey(p.size), p.shape), start
  )
  batches = _batches()

  def regulariser(params, extra):
    anchor, gradient = extra
    linear = _tree_sum(jnp.vdot, gradient, params)
    return linear, _tree_sum(lambda p, a: jnp.sum(jnp.square(p - a)), params, anchor)

  def former(params, extra, x, y, weights):  # the regulariser traced before the forward pass
    linear, quadratic = regulariser(params, extra)
    return model.loss(params, x, y, weights) - linear + 0.5 * alpha * quadratic

  def forward_first(params, extra, x, y, weights):  # the engine's order: forward, then terms
    loss = model.loss(params, x, y, weights)
    linear, quadratic = regulariser(params, extra)
    return loss - linear + 0.5 * alpha * quadratic

  update = feddyn_client_update(model, sgd, 4, alpha=alpha)
  delta, _ = _run_engine(update, start, batches, FedDynInputs(gradient))

  def reference(objective):
    return _run_reference(
      _sgd_reference(sgd, objective), start, batches, sgd.init(start), (start, gradient)
    )

  # The gradient's three contributions are accumulated in another order: the same up to
  # float32 rounding, and bit for bit once the former objective traces the forward pass first.
  _close(delta, reference(former), atol=1e-6, rtol=0)
  _equal(delta, reference(forward_first))


@pytest.mark.parametrize('blend', [True, False])
def test_fedasmu_matches_blend_then_plain_sgd(blend):
  model, sgd = _mlp(), optax.sgd(LR)
  start, fresh = _two_starts(model)
  batches = _batches()
  inputs = fetch_inputs(fresh, blend=blend, gamma=1.5, v=0.8, fresh_version=5, download_version=2)
  update = fedasmu_client_update(
    model, sgd, 4, mu_beta=1.0, gamma_learning_rate=0.3, v_learning_rate=0.2
  )
  delta, aux = _run_engine(update, start, batches, inputs)
  # Formula 7 before the first step, then Formula 4 (plain SGD on the cross-entropy).
  _, beta = fetch_beta(inputs.gamma, inputs.v, inputs.fresh_version, inputs.download_version, 1.0)
  plain = _sgd_reference(
    sgd, lambda params, extra, x, y, weights: model.loss(params, x, y, weights)
  )

  @jax.jit
  def reference(start, batches, fresh):
    params = start
    if blend:
      params = jax.tree_util.tree_map(lambda b, g: (1 - beta) * b + beta * g, start, fresh)
    opt_state = sgd.init(params)
    for batch in batches:
      params, opt_state = plain(params, opt_state, batch, None)
    return jax.tree_util.tree_map(jnp.subtract, params, start)

  _equal(delta, reference(start, batches, fresh))
  assert float(aux['fetch_blended']) == float(blend)
  if blend:
    np.testing.assert_allclose(aux['fetch_beta'], beta, rtol=1e-6)


def test_sgd_client_update_is_the_regularised_objective():
  model = _mlp()
  start, _ = _two_starts(model)
  batches = _batches()
  kwargs = dict(proximal_strength=0.2, distillation_strength=0.4, distillation_temperature=2.0)
  composed = local_update(
    model, optax.sgd(LR), 4, (cross_entropy(), proximal(0.2), distillation(0.4, 2.0))
  )
  _equal(
    _run_engine(sgd_client_update(model, optax.sgd(LR), 4, **kwargs), start, batches)[0],
    _run_engine(composed, start, batches)[0],
  )


def test_teacher_and_optimizer_names_are_parsed_once_into_enums():
  assert distillation(1.0, teacher='task_inputs').teacher is Teacher.TASK_INPUTS
  assert distillation(1.0).teacher is Teacher.DOWNLOADED
  with pytest.raises(
    ValueError, match=r"teacher='stale'; allowed: \('downloaded', 'task_inputs'\)"
  ):
    distillation(1.0, teacher='stale')
  with pytest.raises(
    ValueError, match=r"client.optimizer='rmsprop'; allowed: \('sgd', 'momentum', 'adam'\)"
  ):
    client_optimizer('rmsprop', 0.1)
  params = {'w': jnp.ones(3)}
  grads = {'w': jnp.full(3, 0.5)}
  for name in ClientOptimizer:
    by_name, by_member = client_optimizer(str(name), 0.1), client_optimizer(name, 0.1)
    update_a, _ = by_name.update(grads, by_name.init(params), params)
    update_b, _ = by_member.update(grads, by_member.init(params), params)
    np.testing.assert_array_equal(update_a['w'], update_b['w'])
