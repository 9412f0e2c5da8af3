"""A prepared dataset is checked before it is read: the wrong dataset's files, or a split
replaced by another file, are refused with one line instead of training on them."""

import json
import shutil

import pytest

from fedsim_jax.data.errors import CorruptDatasetError
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.data.manifest import MANIFEST
from fedsim_jax.data.prepare import prepare


@pytest.fixture
def digits_dir(digits_data_dir, tmp_path):
  """A private copy of the prepared digits, free to damage."""
  shutil.copytree(digits_data_dir / 'digits', tmp_path / 'digits')
  return tmp_path


def _version_dir(root):
  return next((root / 'digits').iterdir())


def test_prepare_records_every_file(digits_data_dir):
  version_dir = _version_dir(digits_data_dir)
  manifest = json.loads((version_dir / MANIFEST).read_text())
  assert manifest['name'] == 'digits'
  assert any(name.startswith('digits-test.array_record') for name in manifest['files'])
  for name, entry in manifest['files'].items():
    assert (version_dir / name).stat().st_size == entry['size']
    assert len(entry['sha256']) == 64


def test_a_split_replaced_by_another_file_is_refused(digits_dir):
  version_dir = _version_dir(digits_dir)
  test_file = next(version_dir.glob('digits-test.array_record*'))
  train_file = next(version_dir.glob('digits-train.array_record*'))
  shutil.copyfile(train_file, test_file)
  with pytest.raises(CorruptDatasetError) as error:
    load_dataset('digits', digits_dir)
  message = str(error.value)
  assert '\n' not in message
  assert f'{test_file} is not the file prepared for' in message
  assert '--dataset=digits' in message and '--overwrite' in message


def test_another_datasets_directory_is_refused(digits_dir):
  version_dir = _version_dir(digits_dir)
  info = json.loads((version_dir / 'dataset_info.json').read_text())
  info['name'] = 'mnist'
  (version_dir / 'dataset_info.json').write_text(json.dumps(info))
  with pytest.raises(CorruptDatasetError, match="holds dataset 'mnist', not 'digits'"):
    load_dataset('digits', digits_dir)


def test_a_missing_file_is_refused(digits_dir):
  version_dir = _version_dir(digits_dir)
  next(version_dir.glob('digits-test.array_record*')).unlink()
  with pytest.raises(CorruptDatasetError, match='is missing'):
    load_dataset('digits', digits_dir)


def test_a_directory_prepared_without_a_manifest_loads_and_prepare_records_it(digits_dir):
  version_dir = _version_dir(digits_dir)
  (version_dir / MANIFEST).unlink()
  assert load_dataset('digits', digits_dir).test_y.size > 0  # checked by name only
  prepare('digits', digits_dir)  # already prepared: only the manifest is written
  assert (version_dir / MANIFEST).is_file()
