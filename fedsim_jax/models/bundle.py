"""The `Model` bundle: a flax module plus the loss and metrics the simulator needs.

Every layer above `models` (client updates, evaluation) talks to a model only through this
bundle, so a user can plug in any flax module by wrapping it with `Model`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

Params = Any  # a pytree of arrays
Preprocess = Callable[[jax.Array], jax.Array]


def scale_to_unit_interval(x: jax.Array) -> jax.Array:
  """Maps integer pixels (uint8, 0..255) to float32 in [0, 1]; floats pass through."""
  if jnp.issubdtype(x.dtype, jnp.integer):
    return x.astype(jnp.float32) * (1.0 / 255.0)
  return x.astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class Model:
  """A classifier: a flax module with its input shape, preprocessing, loss and metrics.

  Attributes:
    name: registry name, recorded in run outputs.
    module: flax linen module mapping a batch `[B, *input_shape]` to logits `[B, num_classes]`.
    input_shape: shape of one example as stored in the dataset (e.g. `(28, 28, 1)`).
    num_classes: number of output classes.
    preprocess: applied to raw stored inputs inside jit before the module (default scales
      uint8 images to [0, 1]).
  """

  name: str
  module: nn.Module
  input_shape: tuple[int, ...]
  num_classes: int
  preprocess: Preprocess = scale_to_unit_interval

  def init(self, key: jax.Array) -> Params:
    """Returns freshly initialised parameters."""
    dummy = jnp.zeros((1, *self.input_shape), jnp.float32)
    return self.module.init(key, dummy)['params']

  def apply(self, params: Params, x: jax.Array) -> jax.Array:
    """Logits `[B, num_classes]` for raw inputs `x` `[B, *input_shape]`."""
    return self.module.apply({'params': params}, self.preprocess(x))

  def loss(self, params: Params, x: jax.Array, y: jax.Array,
           weights: jax.Array | None = None) -> jax.Array:
    """Weighted mean softmax cross-entropy; zero-weight examples (padding) do not count."""
    per_example = optax.softmax_cross_entropy_with_integer_labels(self.apply(params, x), y)
    if weights is None:
      return per_example.mean()
    return (per_example * weights).sum() / jnp.maximum(weights.sum(), 1.0)

  def evaluate(self, params: Params, x: jax.Array, y: jax.Array,
               weights: jax.Array) -> Mapping[str, jax.Array]:
    """Summed metrics over a padded batch: `loss_sum`, `correct`, `count` (all scalars)."""
    logits = self.apply(params, x)
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    return {
        'loss_sum': (per_example * weights).sum(),
        'correct': (correct * weights).sum(),
        'count': weights.sum(),
    }

  def num_params(self, params: Params) -> int:
    return sum(int(p.size) for p in jax.tree_util.tree_leaves(params))
