"""2x2 max pooling whose gradient is cheap on XLA:CPU and identical to `flax.linen.max_pool`'s.

`nn.max_pool(x, (2, 2), strides=(2, 2))` lowers to `reduce_window`, whose gradient is XLA's
`select_and_scatter`. XLA:CPU runs that scatter slowly: in the MNIST CNN's SGD step it takes
about a third of the step (docs/results/performance.md, "CNN clients on CPU"). Here the windows
are a reshape, the forward pass a `max` over the window axes, and the backward pass routes each
output's gradient to the first maximum of its window in row-major order, the element
`select_and_scatter` picks (and PyTorch's `MaxPool2d` too), so parameters trained with either
pooling are bit-identical.
"""

import jax
import jax.numpy as jnp


def _windows(x: jax.Array) -> jax.Array:
  """`[..., H, W, C]` -> `[..., H // 2, 2, W // 2, 2, C]`, an odd last row/column dropped as
  'VALID' pooling drops it."""
  *lead, height, width, channels = x.shape
  x = x[..., : height - height % 2, : width - width % 2, :]
  return x.reshape(*lead, height // 2, 2, width // 2, 2, channels)


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
  """Max over non-overlapping 2x2 windows of `[..., H, W, C]` (stride 2, 'VALID')."""
  return _windows(x).max(axis=(-4, -2))


def _forward(x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  pooled = max_pool_2x2(x)
  return pooled, (x, pooled)


def _backward(residuals: tuple[jax.Array, jax.Array], grad: jax.Array) -> tuple[jax.Array]:
  x, pooled = residuals
  windows = _windows(x)
  is_max = windows == pooled[..., :, None, :, None, :]
  # First maximum in row-major window order: (0, 0), (0, 1), (1, 0), (1, 1).
  taken = jnp.zeros_like(pooled, dtype=bool)
  rows = []
  for i in range(2):
    columns = []
    for j in range(2):
      here = is_max[..., :, i, :, j, :]
      columns.append(here & ~taken)
      taken = taken | here
    rows.append(jnp.stack(columns, axis=-2))
  first = jnp.stack(rows, axis=-4)
  routed = jnp.where(first, grad[..., :, None, :, None, :], jnp.zeros((), grad.dtype))
  *lead, half_h, _, half_w, _, channels = routed.shape
  routed = routed.reshape(*lead, 2 * half_h, 2 * half_w, channels)
  height, width = x.shape[-3], x.shape[-2]
  if (height, width) != routed.shape[-3:-1]:  # the dropped odd row/column gets no gradient
    pad = [(0, 0)] * (x.ndim - 3) + [(0, height % 2), (0, width % 2), (0, 0)]
    routed = jnp.pad(routed, pad)
  return (routed,)


max_pool_2x2.defvjp(_forward, _backward)
