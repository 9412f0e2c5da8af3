"""Loads prepared TFDS array_record datasets into host numpy arrays, offline.

`load_dataset` reads `<data_dir>/<name>/<newest version>/` with
`tfds.builder_from_directory(...).as_data_source()`: no TensorFlow, no `tfds.load`,
no download. Examples keep their stored order, which for datasets written by
`fedsim_jax.data.prepare` is the order of the source files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError, prepare_command
from fedsim_jax.data.sources import SOURCES, CentralizedDataset

_READ_CHUNK = 10_000  # Examples per `__getitems__` call.


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


def _find_version_dir(name: str, data_dir: Path) -> Path:
  """The newest `<data_dir>/<name>/X.Y.Z` directory."""
  dataset_dir = data_dir / name
  if not dataset_dir.is_dir():
    if name in SOURCES:
      raise DatasetNotFoundError.not_prepared(name, data_dir)
    prepared = sorted({p.parent.parent.name for p in data_dir.glob('*/*/dataset_info.json')})
    raise DatasetNotFoundError(
        f'Unknown dataset {name!r} in data dir {str(data_dir)!r}; known datasets: '
        f"{', '.join(SOURCES)} (prepare with: {prepare_command('NAME', data_dir)}); "
        f"prepared here: {', '.join(prepared) or 'none'}"
    )
  versions = [(key, p) for p in dataset_dir.iterdir() if (key := _version_key(p)) is not None]
  if not versions:
    raise DatasetNotFoundError.not_prepared(name, data_dir)
  return max(versions)[1]


def _read_split(source: Any, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
  """Reads all examples of a TFDS data source in stored order, in large chunks."""
  images, labels = [], []
  for start in range(0, num_examples, _READ_CHUNK):
    for example in source.__getitems__(range(start, min(start + _READ_CHUNK, num_examples))):
      images.append(example['image'])
      labels.append(example['label'])
  return np.stack(images), np.asarray(labels, np.int32)


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> CentralizedDataset:
  """Loads the train and test splits of a prepared dataset.

  Args:
    name: dataset name, e.g. "fashion_mnist"; any directory under `data_dir` holding
      a TFDS dataset with `image` and `label` features and `train`/`test` splits works.
    data_dir: root of the prepared datasets; defaults to `default_data_dir()`.

  Returns:
    The dataset, images uint8 NHWC and labels int32, in stored order.

  Raises:
    DatasetNotFoundError: the dataset is not prepared (message gives the command).
    CorruptDatasetError: the dataset directory exists but cannot be read.
    ImportError: a feature needs a missing decoder (TFDS `Image` needs PIL or OpenCV).
  """
  root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
  path = _find_version_dir(name, root)
  if not (path / 'dataset_info.json').is_file():
    raise CorruptDatasetError(f'Dataset {name!r} at {str(path)!r} has no dataset_info.json')

  import tensorflow_datasets as tfds  # Deferred: only needed once the directory exists.

  try:
    builder = tfds.builder_from_directory(os.fspath(path))
    features = builder.info.features
    if 'image' not in features or 'label' not in features:
      raise CorruptDatasetError(
          f"Dataset {name!r} at {str(path)!r} lacks 'image'/'label' features: "
          f'{list(features)}'
      )
    missing = {'train', 'test'} - set(builder.info.splits)
    if missing:
      raise CorruptDatasetError(
          f'Dataset {name!r} at {str(path)!r} lacks splits {sorted(missing)}'
      )
    sources = builder.as_data_source()
    arrays = {
        split: _read_split(sources[split], builder.info.splits[split].num_examples)
        for split in ('train', 'test')
    }
  except (CorruptDatasetError, ImportError):  # ImportError: e.g. PIL for Image features.
    raise
  except Exception as e:  # TFDS/array_record raise many types for unreadable files.
    raise CorruptDatasetError(
        f'Cannot read dataset {name!r} at {str(path)!r} ({type(e).__name__}: {e})'
    ) from e
  (train_x, train_y), (test_x, test_y) = arrays['train'], arrays['test']
  return CentralizedDataset(
      name=name,
      train_x=train_x,
      train_y=train_y,
      test_x=test_x,
      test_y=test_y,
      num_classes=features['label'].num_classes,
      label_names=tuple(features['label'].names) or None,
  )
