"""Shared fixtures: small federations that build in milliseconds."""

import numpy as np
import pytest

from fedsim_jax.data.federated import FederatedDataset


def make_toy_federation(num_clients: int = 6, num_classes: int = 4, image_shape=(4, 4, 1),
                        min_size: int = 3, max_size: int = 20, seed: int = 0
                        ) -> FederatedDataset:
  """Random uint8 images, learnable labels (the class sets a bright pixel), uneven clients."""
  rng = np.random.default_rng(seed)
  sizes = rng.integers(min_size, max_size + 1, num_clients)
  total = int(sizes.sum())
  y = rng.integers(0, num_classes, total + 40)
  x = rng.integers(0, 60, (total + 40, *image_shape)).astype(np.uint8)
  flat = x.reshape(len(x), -1)
  flat[np.arange(len(x)), y] = 255
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  parts = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_clients)]
  return FederatedDataset.from_partition('toy', x[:total], y[:total], parts, x[total:],
                                         y[total:], num_classes)


@pytest.fixture
def toy_federation() -> FederatedDataset:
  return make_toy_federation()


@pytest.fixture(scope='session')
def digits_data_dir(tmp_path_factory):
  """A data dir with scikit-learn digits prepared as a tfds array_record dataset."""
  from fedsim_jax.data.prepare import prepare
  data_dir = tmp_path_factory.mktemp('data')
  prepare('digits', data_dir)
  return data_dir
