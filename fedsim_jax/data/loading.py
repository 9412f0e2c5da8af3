"""Loads prepared TFDS array_record datasets into host numpy arrays, offline.

`load_dataset` reads `<data_dir>/<directory>/<newest version>/` with
`tfds.builder_from_directory(...).as_data_source()`: no TensorFlow, no `tfds.load`,
no download. The catalog (`fedsim_jax.data.catalog`) says which directory a dataset lives
in and which features become inputs, labels and natural client ids; any other directory
under the data dir with `image` and `label` features loads as an image dataset. Examples
keep their stored order, which for datasets written by `fedsim_jax.data.prepare` is the
order of the source files.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedsim_jax.data import catalog, manifest, text
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError, prepare_command
from fedsim_jax.data.sources import CentralizedDataset

_READ_CHUNK = 10_000  # Examples per `__getitems__` call.
_SPLITS = ('train', 'test')
# Datasets outside the catalog: images and labels; num_classes from the label feature.
_GENERIC = catalog.DatasetSpec(
  name='', kind=catalog.IMAGE, directory='', input_key='image', label_key='label', num_classes=0
)


def default_data_dir() -> Path:
  """`$FEDSIM_DATA_DIR` if set and non-empty, else `~/fedsim_data`."""
  return Path(os.environ.get('FEDSIM_DATA_DIR') or '~/fedsim_data').expanduser()


def _version_key(path: Path) -> tuple[int, int, int] | None:
  """(major, minor, patch) for a directory named like "1.0.0", else None."""
  parts = path.name.split('.')
  if len(parts) != 3 or not all(p.isdigit() for p in parts) or not path.is_dir():
    return None
  major, minor, patch = (int(p) for p in parts)
  return major, minor, patch


def _prepared_names(data_dir: Path) -> list[str]:
  """Datasets with a complete version dir under `data_dir`, by catalog name where known."""
  by_directory = {spec.directory: name for name, spec in catalog.DATASETS.items()}
  found = set()
  for pattern in ('*/*/dataset_info.json', '*/*/*/dataset_info.json'):
    for info in data_dir.glob(pattern):
      directory = info.parent.parent.relative_to(data_dir).as_posix()
      found.add(by_directory.get(directory, directory))
  return sorted(found)


def _find_version_dir(name: str, data_dir: Path, spec: catalog.DatasetSpec | None) -> Path:
  """The newest `<data_dir>/<directory>/X.Y.Z` directory."""
  dataset_dir = data_dir / (spec.directory if spec is not None else name)
  how = None if spec is None or spec.offline_source else spec.how_to_prepare
  if not dataset_dir.is_dir():
    if spec is not None:
      raise DatasetNotFoundError.not_prepared(name, data_dir, how)
    raise DatasetNotFoundError(
      f'Unknown dataset {name!r} in data dir {str(data_dir)!r}; known datasets: '
      f'{", ".join(catalog.DATASETS)} (prepare with: {prepare_command("NAME", data_dir)}); '
      f'prepared here: {", ".join(_prepared_names(data_dir)) or "none"}'
    )
  versions = [(key, p) for p in dataset_dir.iterdir() if (key := _version_key(p)) is not None]
  if not versions:
    raise DatasetNotFoundError.not_prepared(name, data_dir, how)
  return max(versions)[1]


def _read_split(source: Any, num_examples: int, keys: Sequence[str]) -> dict[str, list[Any]]:
  """Feature -> values of all examples of a TFDS data source in stored order, in chunks."""
  columns: dict[str, list[Any]] = {key: [] for key in keys}
  for start in range(0, num_examples, _READ_CHUNK):
    for example in source.__getitems__(range(start, min(start + _READ_CHUNK, num_examples))):
      for key in keys:
        columns[key].append(example[key])
  return columns


def _strings(values: Sequence[Any]) -> list[str]:
  return [v.decode('utf-8') if isinstance(v, bytes) else str(v) for v in values]


def _feature_values(feature: Any, values: list[Any]) -> np.ndarray:
  """A column as an array: strings for `Text`, int32 for integer features, else stacked."""
  import tensorflow_datasets as tfds

  if isinstance(feature, tfds.features.Text):
    return np.asarray(_strings(values), dtype=str)
  array = np.stack(values) if values else np.zeros((0,), np.int32)
  if isinstance(feature, tfds.features.ClassLabel) or np.issubdtype(array.dtype, np.signedinteger):
    return array.astype(np.int32)
  return array


def _client_ids(
  feature: Any, train: list[Any], test: list[Any]
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...] | None]:
  """(train ids, test ids, names or None): ClassLabel, integer or Text client ids."""
  import tensorflow_datasets as tfds

  if isinstance(feature, tfds.features.Text):
    train_s, test_s = _strings(train), _strings(test)
    names = sorted(set(train_s) | set(test_s))
    index = {n: i for i, n in enumerate(names)}
    to_ids = lambda strings: np.array([index[s] for s in strings], np.int32)  # noqa: E731
    return to_ids(train_s), to_ids(test_s), tuple(names)
  ids = [np.asarray(v, np.int64).astype(np.int32) for v in (train, test)]
  label_names = tuple(feature.names) if isinstance(feature, tfds.features.ClassLabel) else None
  return ids[0], ids[1], label_names


def _tokenize(
  spec: catalog.DatasetSpec, train: list[Any], test: list[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, tuple[str, ...]]:
  """Word ids of a `Text` input (catalog module docstring): (x_train, x_test, y_train, y_test,
  vocabulary); the y arrays are the next tokens for `sequence` datasets, else None."""
  tokenizer = spec.tokenizer
  if tokenizer is None:
    raise CorruptDatasetError(f'Dataset {spec.name!r} has text inputs but no tokenizer')
  train_words = [text.words(s) for s in _strings(train)]
  test_words = [text.words(s) for s in _strings(test)]
  vocabulary = text.word_vocabulary(train_words, tokenizer.vocab_size, tokenizer.reserved)
  if spec.kind == catalog.TEXT:
    encode = lambda docs: text.encode_words(docs, vocabulary, tokenizer.length)  # noqa: E731
    return encode(train_words), encode(test_words), None, None, vocabulary
  bos, eos = vocabulary.index('<bos>'), vocabulary.index('<eos>')

  def encode_next(docs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    ids = text.encode_words(docs, vocabulary, tokenizer.length + 1, prefix=(bos,), suffix=(eos,))
    return ids[:, :-1], ids[:, 1:]

  (x_train, y_train), (x_test, y_test) = encode_next(train_words), encode_next(test_words)
  return x_train, x_test, y_train, y_test, vocabulary


_LOADED: collections.OrderedDict[tuple, CentralizedDataset] = collections.OrderedDict()
_LOADED_MAX = 2  # datasets kept decoded in the process (MNIST: 55 MB, CIFAR-10: 184 MB)
_LOADED_LOCK = threading.Lock()


def _files_fingerprint(path: Path) -> tuple:
  """(relative path, size, mtime) of every file of a prepared dataset: a re-prepared or
  modified directory never matches a cached load."""
  entries = []
  for file in sorted(path.rglob('*')):
    if file.is_file():
      stat = file.stat()
      entries.append((str(file.relative_to(path)), stat.st_size, stat.st_mtime_ns))
  return tuple(entries)


def _freeze(dataset: CentralizedDataset) -> None:
  """Makes every array of `dataset` read-only: cached loads are shared by later callers."""
  for field in dataclasses.fields(dataset):
    value = getattr(dataset, field.name)
    for array in value.values() if isinstance(value, dict) else (value,):
      if isinstance(array, np.ndarray):
        array.flags.writeable = False


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> CentralizedDataset:
  """Loads the train and test splits of a prepared dataset.

  Decoding goes through TFDS one example at a time (about 4 s for MNIST here), so the last
  `_LOADED_MAX` datasets loaded stay in the process: a later run of the same dataset (a seed
  loop, a notebook) gets the same arrays back at once. They are read-only, and a directory
  whose files changed is read again.

  Args:
    name: a catalog name (`fedsim_jax.data.catalog.DATASETS`), e.g. "fashion_mnist",
      "cifar10", "shakespeare"; or any directory under `data_dir` holding a TFDS dataset
      with `image` and `label` features and `train`/`test` splits.
    data_dir: root of the prepared datasets; defaults to `default_data_dir()`.

  Returns:
    The dataset in stored order: images uint8 NHWC and labels int32, or int32 token ids
    (see the catalog for each kind), with natural client ids when the dir has them.

  Raises:
    DatasetNotFoundError: the dataset is not prepared (message says how to prepare it).
    CorruptDatasetError: the dataset directory exists but cannot be read.
    ImportError: encoded images (TFDS `Image` features) and Pillow is not installed.
  """
  root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
  spec = catalog.DATASETS.get(name)
  path = _find_version_dir(name, root, spec)
  if not (path / 'dataset_info.json').is_file():
    raise CorruptDatasetError(f'Dataset {name!r} at {str(path)!r} has no dataset_info.json')
  key = (name, str(path.resolve()), _files_fingerprint(path))
  with _LOADED_LOCK:
    if key in _LOADED:
      _LOADED.move_to_end(key)
      return _LOADED[key]
  # Checked on every decode (a cached load's files are unchanged: the key fingerprints them).
  manifest.verify(
    path,
    spec.directory.partition('/')[0] if spec is not None else None,
    f'prepare it again: {prepare_command(name, root)} --overwrite',
  )
  dataset = _decode(name, path, spec or _GENERIC)
  _freeze(dataset)
  with _LOADED_LOCK:
    _LOADED[key] = dataset
    while len(_LOADED) > _LOADED_MAX:
      _LOADED.popitem(last=False)
  return dataset


def _decode(name: str, path: Path, spec: catalog.DatasetSpec) -> CentralizedDataset:
  """Reads and decodes the prepared dataset at `path` (`load_dataset` without the cache)."""

  import tensorflow_datasets as tfds  # Deferred: only needed once the directory exists.

  try:
    builder = tfds.builder_from_directory(os.fspath(path))
    features = builder.info.features
    required = [k for k in (spec.input_key, spec.label_key) if k is not None]
    if any(k not in features for k in required):
      raise CorruptDatasetError(
        f'Dataset {name!r} at {str(path)!r} lacks features {required}: has {list(features)}'
      )
    missing = set(_SPLITS) - set(builder.info.splits)
    if missing:
      raise CorruptDatasetError(f'Dataset {name!r} at {str(path)!r} lacks splits {sorted(missing)}')
    optional = [k for k in (spec.client_id_key, *spec.extra_keys) if k and k in features]
    sources = builder.as_data_source()
    columns = {
      split: _read_split(
        sources[split], builder.info.splits[split].num_examples, required + optional
      )
      for split in _SPLITS
    }
    metadata = builder.info.metadata or {}
  except (CorruptDatasetError, DatasetNotFoundError):
    raise
  except ImportError as e:  # tfds `Image` features decode with PIL (or OpenCV).
    raise ImportError(
      f'Dataset {name!r} at {str(path)!r} stores encoded images; decoding them needs '
      f'Pillow (pip install pillow)'
    ) from e
  except Exception as e:  # TFDS/array_record raise many types for unreadable files.
    raise CorruptDatasetError(
      f'Cannot read dataset {name!r} at {str(path)!r} ({type(e).__name__}: {e})'
    ) from e
  train, test = columns['train'], columns['test']
  input_feature = features[spec.input_key]
  vocabulary: tuple[str, ...] | None = None
  if isinstance(input_feature, tfds.features.Text):
    train_x, test_x, train_y, test_y, vocabulary = _tokenize(
      spec, train[spec.input_key], test[spec.input_key]
    )
  else:
    train_x = _feature_values(input_feature, train[spec.input_key])
    test_x = _feature_values(input_feature, test[spec.input_key])
    train_y = test_y = None
    if spec.kind == catalog.SEQUENCE:
      vocabulary = tuple(metadata.get('vocabulary', ())) or spec.vocabulary
  if spec.label_key is not None:
    label_feature = features[spec.label_key]
    train_y = _feature_values(label_feature, train[spec.label_key])
    test_y = _feature_values(label_feature, test[spec.label_key])
  if spec.kind == catalog.IMAGE and train_x.ndim == 3:  # [N, H, W] -> [N, H, W, 1]
    train_x, test_x = train_x[..., None], test_x[..., None]
  label_names = None
  num_classes = spec.num_classes
  if spec.label_key is not None and isinstance(features[spec.label_key], tfds.features.ClassLabel):
    num_classes = features[spec.label_key].num_classes
    label_names = tuple(features[spec.label_key].names) or None
  if vocabulary is not None and spec.kind == catalog.SEQUENCE and spec.tokenizer is None:
    num_classes = len(vocabulary)  # Stored int tokens; tokenised text keeps vocab_size.
  if train_y is None or test_y is None:  # No label feature, and the inputs give no labels.
    raise CorruptDatasetError(
      f'Dataset {name!r} at {str(path)!r} has no labels: no label feature, and only Text '
      f'inputs of sequence datasets give labels (their next tokens)'
    )
  if num_classes == 0 and train_y.size:  # Integer labels, no ClassLabel.
    num_classes = int(max(train_y.max(), test_y.max() if test_y.size else 0)) + 1
  train_ids = test_ids = client_names = None
  if spec.client_id_key in optional:
    train_ids, test_ids, client_names = _client_ids(
      features[spec.client_id_key], train[spec.client_id_key], test[spec.client_id_key]
    )
  extras = [k for k in spec.extra_keys if k in optional]
  return CentralizedDataset(
    name=name,
    train_x=train_x,
    train_y=train_y,
    test_x=test_x,
    test_y=test_y,
    num_classes=num_classes,
    label_names=label_names,
    kind=spec.kind,
    train_client_ids=train_ids,
    test_client_ids=test_ids,
    client_names=client_names,
    vocabulary=vocabulary,
    train_extras={k: _feature_values(features[k], train[k]) for k in extras} or None,
    test_extras={k: _feature_values(features[k], test[k]) for k in extras} or None,
  )
