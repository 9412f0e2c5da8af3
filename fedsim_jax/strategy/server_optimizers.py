"""Server optimizers of FedOpt, as optax transformations of the pseudo-gradient.

Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2, with g_t = -Delta_t:
  m_t = b1 m_{t-1} + (1 - b1) Delta_t
  v_t = v_{t-1} + Delta_t^2                                  (FedAdagrad)
  v_t = v_{t-1} - (1 - b2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (FedYogi)
  v_t = b2 v_{t-1} + (1 - b2) Delta_t^2                      (FedAdam)
  x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)
with m_{-1} = 0 and v_{-1} = tau^2 (their Section 5 initialisation) and no bias correction. This
differs from `optax.adam` (bias-corrected, v starting at 0), which is available as
`algorithm.kwargs.adaptive_form='optax'`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedsim_jax.str_enum import StrEnum


class ServerOptimizer(StrEnum):
  """The named server optimizers (`algorithm.kwargs.server_optimizer`)."""

  SGD = 'sgd'
  MOMENTUM = 'momentum'
  ADAGRAD = 'adagrad'
  YOGI = 'yogi'
  ADAM = 'adam'


class AdaptiveForm(StrEnum):
  """How the adaptive rules are written (`algorithm.kwargs.adaptive_form`)."""

  REDDI = 'reddi'  # Reddi et al., Algorithm 2 as written
  OPTAX = 'optax'  # optax's optimizers, bias correction where optax applies it


ADAPTIVE = (ServerOptimizer.ADAGRAD, ServerOptimizer.YOGI, ServerOptimizer.ADAM)
ADAPTIVE_RULES = tuple(rule.value for rule in ADAPTIVE)
ADAPTIVE_FORMS = tuple(form.value for form in AdaptiveForm)
SERVER_OPTIMIZERS = tuple(name.value for name in ServerOptimizer)


class AdaptiveState(NamedTuple):
  first_moment: optax.Updates
  second_moment: optax.Updates


def reddi_adaptive(
  rule: str, learning_rate: float, b1: float = 0.9, b2: float = 0.99, tau: float = 1e-3
) -> optax.GradientTransformation:
  """FedAdagrad / FedYogi / FedAdam server update exactly as Reddi et al., Algorithm 2."""
  if rule not in ADAPTIVE_RULES:
    raise ValueError(f'adaptive rule {rule!r}; allowed: {ADAPTIVE_RULES}')
  kind = ServerOptimizer(rule)

  def init(params):
    return AdaptiveState(
      first_moment=jax.tree_util.tree_map(jnp.zeros_like, params),
      second_moment=jax.tree_util.tree_map(lambda p: jnp.full_like(p, tau**2), params),
    )

  def second_moment(v, g):
    g2 = jnp.square(g)
    if kind is ServerOptimizer.ADAGRAD:
      return v + g2
    if kind is ServerOptimizer.YOGI:
      return v - (1 - b2) * g2 * jnp.sign(v - g2)
    return b2 * v + (1 - b2) * g2

  def update(grads, state, params=None):
    del params
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.first_moment, grads)
    v = jax.tree_util.tree_map(second_moment, state.second_moment, grads)
    # grads are -Delta, so -eta m / (sqrt(v) + tau) moves x along +Delta.
    updates = jax.tree_util.tree_map(lambda m, v: -learning_rate * m / (jnp.sqrt(v) + tau), m, v)
    return updates, AdaptiveState(m, v)

  return optax.GradientTransformation(init, update)


def server_optimizer(
  name: str,
  learning_rate: float,
  *,
  momentum: float = 0.9,
  b1: float = 0.9,
  b2: float = 0.99,
  eps: float = 1e-3,
  adaptive_form: str = 'reddi',
) -> optax.GradientTransformation:
  """Named server optimizers: 'sgd' (FedAvg when learning_rate = 1), 'momentum' (FedAvgM,
  Hsu et al. 2019: v <- momentum v + pseudo-gradient), and the adaptive rules.

  Args:
    eps: the adaptivity tau of Reddi et al. (they tune it over 1e-1 ... 1e-5).
    adaptive_form: 'reddi' (Algorithm 2 as written) or 'optax' (optax.adam / yogi / adagrad
      with bias correction where optax applies it).
  """
  if learning_rate <= 0:
    raise ValueError(f'algorithm.kwargs.server_learning_rate={learning_rate}; must be > 0')
  if name not in SERVER_OPTIMIZERS:
    raise ValueError(f'server optimizer {name!r}; allowed: {SERVER_OPTIMIZERS}')
  kind = ServerOptimizer(name)
  if kind is ServerOptimizer.SGD:
    return optax.sgd(learning_rate)
  if kind is ServerOptimizer.MOMENTUM:
    return optax.sgd(learning_rate, momentum=momentum)
  if adaptive_form not in ADAPTIVE_FORMS:
    raise ValueError(f'algorithm.kwargs.adaptive_form={adaptive_form!r}; allowed: {ADAPTIVE_FORMS}')
  if AdaptiveForm(adaptive_form) is AdaptiveForm.REDDI:
    return reddi_adaptive(kind, learning_rate, b1, b2, eps)
  return _OPTAX_ADAPTIVE[kind](learning_rate, b1, b2, eps)


# optax's form of each adaptive rule, from (learning_rate, b1, b2, eps).
_OPTAX_ADAPTIVE: dict[ServerOptimizer, Callable[..., optax.GradientTransformation]] = {
  ServerOptimizer.ADAM: lambda lr, b1, b2, eps: optax.adam(lr, b1=b1, b2=b2, eps=eps),
  ServerOptimizer.YOGI: lambda lr, b1, b2, eps: optax.yogi(lr, b1=b1, b2=b2, eps=eps),
  ServerOptimizer.ADAGRAD: lambda lr, b1, b2, eps: optax.adagrad(lr, eps=eps),
}
