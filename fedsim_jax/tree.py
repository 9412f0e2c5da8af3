"""Pytree helpers for stacked client results (leaves `[K, ...]`), shared by every layer.

The bottom tier of the package: imports only jax. Inner products of trees are
`optax.tree_utils.tree_vdot`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp


@jax.jit
def row(tree: Any, index: jax.Array | int) -> Any:
  """`leaf[index]` of every leaf: one client's row of a stacked tree.

  Jitted so that taking a row costs one dispatch, not one per leaf; `index` is traced, so every
  row of trees of one structure reuses one program.
  """
  return jax.tree_util.tree_map(lambda leaf: leaf[index], tree)


def stack(trees: Sequence[Any]) -> Any:
  """Trees of one structure stacked leafwise along a new leading axis (leaves `[len(trees),
  ...]`)."""
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


@functools.partial(jax.jit, donate_argnums=0)
def add_weighted_rows(total: Any, coefficients: jax.Array, stacked: Any) -> Any:
  """`total + sum_k coefficients[k] * stacked[k]` leafwise over the rows of a stacked tree (a
  linear aggregation's sum of stacked deltas); `total` is donated."""
  return jax.tree_util.tree_map(
    lambda t, d: t + jnp.tensordot(coefficients, d, axes=1), total, stacked
  )
