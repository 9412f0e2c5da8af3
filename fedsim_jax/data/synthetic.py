"""Small synthetic federations that build in milliseconds (tests, notebooks, benchmarks)."""

from __future__ import annotations

import numpy as np

from fedsim_jax.data.federated import FederatedDataset


def toy_federation(
  num_clients: int = 6,
  num_classes: int = 4,
  image_shape: tuple[int, ...] = (4, 4, 1),
  min_size: int = 3,
  max_size: int = 20,
  num_test: int = 40,
  seed: int = 0,
) -> FederatedDataset:
  """Random uint8 images whose class sets one bright pixel, over clients of uneven sizes.

  Client sizes are drawn uniformly from [min_size, max_size]; the labels are learnable, so a
  few rounds of training visibly improve accuracy.
  """
  if int(np.prod(image_shape)) < num_classes:
    raise ValueError(f'image_shape={image_shape} has fewer pixels than num_classes={num_classes}')
  rng = np.random.default_rng(seed)
  sizes = rng.integers(min_size, max_size + 1, num_clients)
  total = int(sizes.sum())
  y = rng.integers(0, num_classes, total + num_test)
  x = rng.integers(0, 60, (total + num_test, *image_shape)).astype(np.uint8)
  x.reshape(len(x), -1)[np.arange(len(x)), y] = 255
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  parts = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_clients)]
  return FederatedDataset.from_partition(
    'toy', x[:total], y[:total], parts, x[total:], y[total:], num_classes
  )


def toy_text_federation(
  num_clients: int = 6,
  vocabulary_size: int = 12,
  length: int = 8,
  min_size: int = 3,
  max_size: int = 20,
  num_test: int = 40,
  seed: int = 0,
) -> FederatedDataset:
  """Random token sequences for next-token models: inputs `[N, length]` int32 in
  [1, vocabulary_size) and targets the inputs shifted left by one (id 0 is padding, as in the
  Shakespeare data), over clients of uneven sizes."""
  rng = np.random.default_rng(seed)
  sizes = rng.integers(min_size, max_size + 1, num_clients)
  total = int(sizes.sum())
  tokens = rng.integers(1, vocabulary_size, (total + num_test, length + 1)).astype(np.int32)
  x, y = tokens[:, :-1], tokens[:, 1:]
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  parts = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_clients)]
  return FederatedDataset.from_partition(
    'toy_text', x[:total], y[:total], parts, x[total:], y[total:], vocabulary_size
  )
