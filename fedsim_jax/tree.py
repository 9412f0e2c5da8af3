"""Pytree helpers for stacked client results (leaves `[K, ...]`), shared by every layer.

The bottom tier of the package: imports only jax. Inner products of trees are
`optax.tree_utils.tree_vdot`.
"""

from __future__ import annotations

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
