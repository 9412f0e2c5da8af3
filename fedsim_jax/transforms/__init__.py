"""Update transforms: privacy, robustness, compression and attacks on every algorithm.

`UpdateTransform` is an optax-style (init, update) pair over a batch of client updates
(`base`); `with_update_transforms` puts a chain of them in front of any aggregator. The
transforms: `privacy` (clipping, Gaussian noise, adaptive clipping), `robust` (median, trimmed
mean, Krum, norm bounding, centered clipping), `compression` (QSGD, top-k, random-k with error
feedback), `attacks` (sign flip, scaling, Gaussian, label flipping); `accounting` turns DP
releases into epsilon; `plugins` registers them as the config's `attack`, `privacy`,
`compression` and `robust` sections.
"""

from fedsim_jax.transforms.base import (
  TransformedState,
  UpdateTransform,
  chain,
  identity,
  stateless,
  with_update_transforms,
)

__all__ = [
  'TransformedState',
  'UpdateTransform',
  'chain',
  'identity',
  'stateless',
  'with_update_transforms',
]
