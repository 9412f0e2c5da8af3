"""Staleness functions s(u) of asynchronous aggregation, u = versions since the download.

Xie et al. 2019 ("Asynchronous Federated Optimization", Section 5.2) define the constant,
polynomial and hinge families; the exponential one is common in later work. Each factory returns
a jnp function of an integer staleness array, so it runs inside jitted aggregators.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from fedsim_jax.str_enum import StrEnum

StalenessFn = Callable[[jax.Array], jax.Array]


class Staleness(StrEnum):
  """The named staleness functions (the values of `algorithm.kwargs.staleness`)."""

  CONSTANT = 'constant'
  POLYNOMIAL = 'polynomial'
  HINGE = 'hinge'
  EXPONENTIAL = 'exponential'


STALENESS_FUNCTIONS = tuple(kind.value for kind in Staleness)


def constant() -> StalenessFn:
  """s(u) = 1."""
  return lambda u: jnp.ones_like(u, jnp.float32)


def polynomial(a: float) -> StalenessFn:
  """s(u) = (u + 1)^-a (FedAsync; FedCompass uses a = 0.5)."""
  return lambda u: jnp.power(u.astype(jnp.float32) + 1.0, -a)


def hinge(a: float, b: float) -> StalenessFn:
  """s(u) = 1 if u <= b else 1 / (a (u - b) + 1)."""
  return lambda u: jnp.where(u <= b, 1.0, 1.0 / (a * (u.astype(jnp.float32) - b) + 1.0))


def exponential(a: float) -> StalenessFn:
  """s(u) = exp(-a u)."""
  return lambda u: jnp.exp(-a * u.astype(jnp.float32))


def scaled(factor: float, fn: StalenessFn) -> StalenessFn:
  """u -> factor * fn(u), e.g. FedCompass's st(u) = alpha (u + 1)^-a."""
  return lambda u: factor * fn(u)


# Each name's factory of (a, b).
_FACTORIES: dict[Staleness, Callable[[float, float], StalenessFn]] = {
  Staleness.CONSTANT: lambda a, b: constant(),
  Staleness.POLYNOMIAL: lambda a, b: polynomial(a),
  Staleness.HINGE: hinge,
  Staleness.EXPONENTIAL: lambda a, b: exponential(a),
}


def make_staleness(name: str, *, a: float = 0.5, b: float = 4.0) -> StalenessFn:
  """Builds a named staleness function (a `Staleness` or its value; `a`, `b` as in Xie et al.)."""
  if name not in STALENESS_FUNCTIONS:
    raise ValueError(f'staleness.function={name!r}; allowed: {STALENESS_FUNCTIONS}')
  return _FACTORIES[Staleness(name)](a, b)
