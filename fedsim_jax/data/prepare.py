"""Writes local sources as TFDS array_record datasets, offline and without TensorFlow.

Library use::

    path = prepare("fashion_mnist", "~/fedsim_data")   # -> ~/fedsim_data/fashion_mnist/1.0.0

Command line::

    python -m fedsim_jax.data.prepare --dataset=fashion_mnist --data_dir=DIR \
        [--source=PATH] [--overwrite]
    python -m fedsim_jax.data.prepare --dataset=all --data_dir=DIR

Each dataset has features `image` (uint8 Tensor [H, W, C]) and `label` (ClassLabel)
and splits `train` and `test`. Shuffling is disabled and example keys are the source
indices, so examples are stored, and loaded back, in the source order.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import numpy as np
from absl import app, flags, logging

from fedsim_jax.data.errors import DatasetNotFoundError
from fedsim_jax.data.loading import default_data_dir
from fedsim_jax.data.sources import SOURCES, CentralizedDataset

DATASET_VERSION = '1.0.0'


def _builder_class(raw: CentralizedDataset) -> type:
  """A TFDS builder named `raw.name` whose examples are the arrays of `raw`."""
  import tensorflow_datasets as tfds

  class ArrayBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    name = raw.name
    VERSION = tfds.core.Version(DATASET_VERSION)
    # No code dir with checksum files: examples come from memory. (Locating it
    # inside a package also needs the uninstalled `importlib_resources`.)
    code_path = None

    def _info(self) -> tfds.core.DatasetInfo:
      if raw.label_names is not None:
        label = tfds.features.ClassLabel(names=list(raw.label_names))
      else:
        label = tfds.features.ClassLabel(num_classes=raw.num_classes)
      return tfds.core.DatasetInfo(
          builder=self,
          features=tfds.features.FeaturesDict(
              {
                  'image': tfds.features.Tensor(shape=raw.train_x.shape[1:], dtype=np.uint8),
                  'label': label,
              }
          ),
          supervised_keys=('image', 'label'),
          disable_shuffling=True,
      )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict:
      del dl_manager  # Nothing is downloaded.
      return {
          'train': self._generate_examples(raw.train_x, raw.train_y),
          'test': self._generate_examples(raw.test_x, raw.test_y),
      }

    def _generate_examples(self, x: np.ndarray, y: np.ndarray) -> Iterator[tuple[int, dict]]:
      for i in range(len(y)):
        yield i, {'image': x[i], 'label': int(y[i])}

    # TFDS prints a "Downloading and preparing" banner; nothing is downloaded here.
    def _log_download_bytes(self) -> None:
      pass

    def _log_download_done(self) -> None:
      pass

  return ArrayBuilder


def prepare(
    name: str,
    data_dir: str | os.PathLike[str],
    *,
    source: str | None = None,
    overwrite: bool = False,
) -> Path:
  """Builds `<data_dir>/<name>/<DATASET_VERSION>/` from the local source of dataset `name`.

  An existing complete directory (one with `dataset_info.json`; TFDS only moves a
  build into place once finished) is reused unless `overwrite` is set.

  Args:
    name: a key of `SOURCES`.
    data_dir: root of the prepared datasets.
    source: overrides the source location (file or directory, see `sources`).
    overwrite: rebuild even if the dataset is already prepared.

  Returns:
    The dataset version directory.

  Raises:
    ValueError: unknown `name`, or `source` given for a dataset without one.
    DatasetNotFoundError: the source is missing.
    CorruptDatasetError: the source cannot be read.
  """
  if name not in SOURCES:
    raise ValueError(f"Unknown dataset {name!r}; allowed: {', '.join(SOURCES)}")
  if source is not None and name == 'digits':
    raise ValueError("Dataset 'digits' is bundled with scikit-learn and takes no source")
  root = Path(data_dir).expanduser()
  out = root / name / DATASET_VERSION
  if (out / 'dataset_info.json').is_file() and not overwrite:
    return out
  raw = SOURCES[name](source) if source is not None else SOURCES[name]()

  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()
  if out.exists():
    shutil.rmtree(out)
  builder = _builder_class(raw)(data_dir=os.fspath(root), file_format='array_record')
  with tempfile.TemporaryDirectory() as scratch:  # Else TFDS leaves <data_dir>/downloads.
    builder.download_and_prepare(download_dir=scratch)
  return out


def _define_flags() -> None:
  # Defined on demand, not at import, so that importing this module as a library
  # never clashes with flags of the same name defined by other programs.
  flags.DEFINE_string('dataset', None, f"One of {', '.join(SOURCES)}, or 'all'.", required=True)
  flags.DEFINE_string(
      'data_dir', None, 'Root of prepared datasets [default: $FEDSIM_DATA_DIR or ~/fedsim_data].'
  )
  flags.DEFINE_string('source', None, 'Overrides the source file/directory of --dataset.')
  flags.DEFINE_bool('overwrite', False, 'Rebuild datasets that are already prepared.')


def _usage_error(message: str) -> NoReturn:
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def _main(argv: list[str]) -> None:
  logging.set_verbosity(logging.WARNING)  # TFDS logs every file it writes at INFO.
  flag_values = flags.FLAGS
  name = flag_values.dataset
  if len(argv) > 1:
    _usage_error(f'unexpected arguments {argv[1:]}')
  if name != 'all' and name not in SOURCES:
    _usage_error(f"unknown --dataset={name!r}; allowed: {', '.join(SOURCES)}, all")
  if name == 'all' and flag_values.source is not None:
    _usage_error('--source cannot be combined with --dataset=all')
  data_dir = flag_values.data_dir or default_data_dir()
  for dataset in SOURCES if name == 'all' else [name]:
    try:
      path = prepare(
          dataset, data_dir, source=flag_values.source, overwrite=flag_values.overwrite
      )
      print(path)
    except DatasetNotFoundError as e:
      if name != 'all':
        print(f'error: {e}', file=sys.stderr)
        sys.exit(1)
      print(f'skipped {dataset}: {e}', file=sys.stderr)
    except ValueError as e:  # Includes CorruptDatasetError.
      print(f'error: {e}', file=sys.stderr)
      sys.exit(1)


def run_main() -> None:
  """Console entry point (`fedsim-prepare` and `python -m fedsim_jax.data.prepare`)."""
  _define_flags()
  app.run(_main)


if __name__ == '__main__':
  run_main()
