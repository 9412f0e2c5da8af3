"""Datasets and partitioners are plugins: each is registered with a settings dataclass, selected
by `data.*` / `partition.*`, and a user's own is one file a config imports; settings of the
earlier layout give one line naming their new place, and stored configs in it still resume."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fedsim_jax import config as config_lib
from fedsim_jax.config import ConfigError, base_config, upgrade_layout
from fedsim_jax.data import datasets
from fedsim_jax.data.partitioners import PARTITIONERS
from fedsim_jax.experiment import config_differences, run_experiment, validate
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FEDSIM_RUN = os.path.join(os.path.dirname(sys.executable), 'fedsim-run')


def _fedsim_run(*flags, timeout=300):
  """`fedsim-run` with this checkout first on the path."""
  env = dict(
    os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_REPO, os.environ.get('PYTHONPATH')]))
  )
  return subprocess.run(
    [_FEDSIM_RUN, *flags], capture_output=True, text=True, cwd=_REPO, timeout=timeout, env=env
  )


def _one_error_line(result):
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-2000:]
  lines = [line for line in result.stderr.splitlines() if not line.startswith(('I', 'W'))]
  assert len(lines) == 1, result.stderr[-2000:]
  return lines[0]


def _epochs_config_file(tmp_path, data_dir=None):
  """A config file of a small run whose tasks are one local epoch (so each client's gradient
  steps tell its size): batch 50, 5 clients all in every round, 2 rounds."""
  path = tmp_path / 'epochs_config.py'
  data = f'  c.data.data_dir = {str(data_dir)!r}\n' if data_dir is not None else ''
  path.write_text(
    'from fedsim_jax.config import base_config\n\n\n'
    'def get_config():\n'
    '  c = base_config()\n'
    "  c.data.name = 'digits'\n"
    f'{data}'
    '  c.data.num_clients = 5\n'
    '  c.model.kwargs.hidden_sizes = (16,)\n'
    '  c.client.learning_rate = 0.1\n'
    '  c.client.batch_size = 50\n'
    '  c.client.local_steps = None\n'
    '  c.client.local_epochs = 1.0\n'
    '  c.algorithm.kwargs.cohort_size = 5\n'
    '  c.run.num_rounds = 2\n'
    '  c.run.eval_every = 1\n'
    '  return c\n'
  )
  return str(path)


def _read(workdir, name):
  with open(os.path.join(workdir, name), encoding='utf-8') as f:
    return json.load(f)


# --- a user's partitioner and dataset source, one file each, through the binary -----------


def test_binary_runs_a_partitioner_registered_by_user_code(digits_data_dir, tmp_path):
  workdir = tmp_path / 'run'
  result = _fedsim_run(
    f'--config={_epochs_config_file(tmp_path, digits_data_dir)}',
    '--config.partition.module=tests.fixtures.leading_partitioner',
    '--config.partition.name=leading',
    '--config.partition.kwargs.first_share=0.6',
    f'--workdir={workdir}',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert _read(workdir, 'config.json')['partition'] == {
    'name': 'leading',
    'module': 'tests.fixtures.leading_partitioner',
    'kwargs': {'first_share': 0.6},
  }
  # 1,500 digits: client 0 holds 900 (18 batches of 50), the others 150 (3 batches).
  clients = _read(workdir, 'clients.json')
  assert clients['aggregated'] == [2] * 5
  assert clients['gradient_steps'] == [36, 6, 6, 6, 6]


def test_binary_runs_a_dataset_source_registered_by_user_code(tmp_path):
  workdir = tmp_path / 'run'
  result = _fedsim_run(
    f'--config={_epochs_config_file(tmp_path)}',
    '--config.data.module=tests.fixtures.digits_source',
    '--config.data.name=digits_in_memory',
    '--config.data.kwargs.train_examples=500',
    '--config.partition.name=iid',
    f'--workdir={workdir}',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  data = _read(workdir, 'config.json')['data']
  assert data['name'] == 'digits_in_memory' and data['module'] == 'tests.fixtures.digits_source'
  assert data['kwargs'] == {'train_examples': 500}
  # 500 examples over 5 clients: 100 each, 2 batches of 50 per task.
  assert _read(workdir, 'clients.json')['gradient_steps'] == [4] * 5


def test_a_registered_source_s_settings_are_checked_in_one_line(tmp_path):
  result = _fedsim_run(
    f'--config={_epochs_config_file(tmp_path)}',
    '--config.data.module=tests.fixtures.digits_source',
    '--config.data.name=digits_in_memory',
    '--config.data.kwargs.train_exampels=500',
    f'--workdir={tmp_path / "run"}',
  )
  line = _one_error_line(result)
  assert 'data.kwargs.train_exampels is not a setting of DigitsInMemorySettings' in line
  assert "did you mean 'train_examples'" in line
  assert not (tmp_path / 'run').exists()


# --- settings of the earlier layout ---------------------------------------------------------


@pytest.mark.parametrize(
  'override, expected',
  [
    ('--config.data.partition=iid', 'data.partition is not a setting; it is now partition.name'),
    (
      '--config.data.concentration=0.1',
      'data.concentration is not a setting; it is now partition.kwargs.concentration: the '
      'settings of the partitioner that partition.name names',
    ),
    ('--config.data.budget_skew=none', 'it is now partition.kwargs.budget_skew'),
    ('--config.data.classes_per_client=(2,3)', 'it is now partition.kwargs.classes_per_client'),
  ],
)
def test_an_old_data_setting_in_a_flag_names_its_new_place(tmp_path, override, expected):
  result = _fedsim_run(
    '--config=fedsim_jax.configs.fedavg_fashion_mnist', f'--workdir={tmp_path / "run"}', override
  )
  assert expected in _one_error_line(result)
  assert not (tmp_path / 'run').exists()


def test_an_old_data_setting_in_a_config_file_names_its_new_place(tmp_path):
  path = tmp_path / 'old_config.py'
  path.write_text(
    'from fedsim_jax.config import base_config\n\n\n'
    'def get_config():\n'
    '  c = base_config()\n'
    "  c.data.partition = 'shards'\n"
    '  c.data.shards_per_client = 4\n'
    '  return c\n'
  )
  result = _fedsim_run(f'--config={path}', f'--workdir={tmp_path / "run"}')
  assert 'data.partition is not a setting; it is now partition.name' in _one_error_line(result)
  assert not (tmp_path / 'run').exists()


def _old_layout(stored):
  """`stored` (a resolved config of the current layout) as an earlier version wrote it: every
  partition setting in `data`, with the defaults of then for the partitioner's other fields."""
  old = json.loads(json.dumps(stored))
  partition = old.pop('partition')
  data = old['data']
  del data['kwargs'], data['module']
  data.update(
    partition=partition['name'],
    concentration=0.5,
    min_client_size=10,
    shards_per_client=2,
    classes_per_client=None,
    alpha_1=None,
    alpha_2=None,
    gamma=0.0,
    balance=False,
    budget_skew='high',
    skewed_fraction=0.1,
  )
  data.update(partition['kwargs'])
  return old


@pytest.mark.parametrize(
  'name, kwargs',
  [
    ('dirichlet', {'concentration': 0.3, 'min_client_size': 5, 'balance': True}),
    ('class', {'classes_per_client': [3, 5]}),
    ('natural', {'min_client_size': 1}),
    ('iid', {}),
    ('budget_skewed', {'budget_skew': 'moderate', 'shards_per_client': 2, 'skewed_fraction': 0.2}),
  ],
)
def test_upgrade_layout_moves_the_partition_settings_of_a_stored_config(name, kwargs):
  new = base_config().to_dict()
  new['partition'] = {'name': name, 'kwargs': kwargs, 'module': None}
  old = _old_layout(new)
  assert 'partition' not in old and 'concentration' in old['data']
  upgraded = upgrade_layout(old)
  assert upgraded == json.loads(json.dumps(new))
  assert set(upgraded['partition']['kwargs']) <= set(PARTITIONERS.get(name).settings.field_names())
  assert upgrade_layout(upgraded) == upgraded  # the current layout is left as it is
  assert old['data']['partition'] == name  # the argument is not changed


def _rewrite_checkpointed_config(workdir, rewrite):
  """Replaces the config in the meta JSON of every checkpoint of `workdir` by `rewrite(config)`."""
  found = 0
  for path in glob.glob(os.path.join(workdir, 'checkpoints', '*', 'meta', '*')):
    with open(path, encoding='utf-8') as f:
      try:
        meta = json.load(f)
      except ValueError:
        continue
    if isinstance(meta, dict) and 'config' in meta:
      meta['config'] = rewrite(meta['config'])
      with open(path, 'w', encoding='utf-8') as f:
        json.dump(meta, f)
      found += 1
  assert found, os.listdir(os.path.join(workdir, 'checkpoints'))


def test_a_run_checkpointed_in_the_old_layout_resumes(digits_data_dir, tmp_path):
  config = make_tiny_config(
    'fedavg', digits_data_dir, clients=5, **{'partition.kwargs.concentration': 0.3}
  )
  config.partition.kwargs.min_client_size = 5
  workdir = str(tmp_path / 'run')
  run_experiment(config, workdir)
  _rewrite_checkpointed_config(workdir, _old_layout)
  longer = config.copy_and_resolve_references()
  longer.run.num_rounds = 6
  summary = run_experiment(longer, workdir, resume=True)
  assert summary['status'] == 'completed' and summary['final_version'] == 6

  # A run whose stored partition differs is refused, naming the setting in its new place.
  def other_concentration(stored):
    stored = upgrade_layout(stored)
    kwargs = dict(stored['partition']['kwargs'], concentration=0.9)
    return _old_layout(dict(stored, partition=dict(stored['partition'], kwargs=kwargs)))

  _rewrite_checkpointed_config(workdir, other_concentration)
  longer.run.num_rounds = 8
  with pytest.raises(ConfigError, match=r'partition\.kwargs\.concentration'):
    run_experiment(longer, workdir, resume=True)


def test_config_differences_of_an_upgraded_config_are_none():
  new = base_config().to_dict()
  new['partition']['kwargs'] = {'concentration': 0.5, 'min_client_size': 10, 'balance': False}
  assert config_differences(upgrade_layout(_old_layout(new)), new) == []


# --- each partitioner's and source's settings ---------------------------------------------

# A value each field rejects.
_BAD_VALUES = {
  'concentration': 0.0,
  'min_client_size': -1,
  'balance': 'yes',
  'shards_per_client': 0,
  'classes_per_client': (0, 3),
  'alpha_1': float('nan'),
  'alpha_2': -0.5,
  'gamma': 1.5,
  'budget_skew': 'extreme',
  'skewed_fraction': 2.0,
}


@pytest.mark.parametrize('name', PARTITIONERS.names())
def test_each_partitioner_checks_its_settings_in_one_line(name):
  config = base_config()
  config.client.local_steps = 1
  config.partition.name = name
  config.partition.kwargs.not_a_setting = 1
  with pytest.raises(ConfigError) as info:
    validate(config)
  message = str(info.value)
  assert message.startswith('partition.kwargs.not_a_setting is not a setting of ')
  assert '\n' not in message
  for field in PARTITIONERS.get(name).settings.field_names():
    config = base_config()
    config.client.local_steps = 1
    config.partition.name = name
    config.partition.kwargs[field] = _BAD_VALUES[field]
    with pytest.raises(ConfigError) as info:
      validate(config)
    message = str(info.value)
    assert message.startswith(f'partition.kwargs.{field}=') and 'allowed values' in message
    assert '\n' not in message


def test_an_unknown_partitioner_or_module_is_one_line():
  config = base_config()
  config.partition.name = 'dirichlett'
  with pytest.raises(ConfigError, match=r"partition\.name='dirichlett' is not known \(did you"):
    validate(config)
  config.partition.name = 'dirichlet'
  config.partition.module = 'no_such_module_here'
  with pytest.raises(ConfigError, match=r"partition\.module='no_such_module_here' cannot be"):
    validate(config)


def test_catalog_datasets_are_sources_and_other_names_prepared_directories():
  assert {'fashion_mnist', 'mnist', 'cifar10', 'shakespeare', 'digits'} <= set(
    datasets.DATASET_SOURCES.names()
  )
  assert datasets.resolve('my_prepared_dir', {}).name == 'my_prepared_dir'
  with pytest.raises(ConfigError, match=r'data\.kwargs\.size is not a setting of Prepared'):
    datasets.resolve('fashion_mnist', {'size': 3})
  with pytest.raises(ConfigError, match=r'data\.kwargs\.size is not a setting of Prepared'):
    datasets.resolve('my_prepared_dir', {'size': 3})


def test_a_prepared_directory_outside_the_catalog_still_loads(digits_data_dir, tmp_path):
  os.symlink(os.path.join(digits_data_dir, 'digits'), tmp_path / 'my_digits')
  loaded = datasets.load(datasets.resolve('my_digits', {}), str(tmp_path))
  assert loaded.name == 'my_digits' and loaded.train_x.shape[0] == 1500


def test_describe_lists_each_partitioner_and_dataset_source_with_its_settings():
  text = config_lib.describe()
  for name in PARTITIONERS.names():
    assert f"partition.name='{name}'" in text
  assert 'partition.kwargs.concentration = 0.5\n    Dirichlet alpha' in text
  assert "data.name='fashion_mnist'" in text
  for removed in ('data.partition =', 'data.concentration =', 'data.gamma ='):
    assert removed not in text
  assert np.all([f'partition.kwargs.{f} = ' in text for f in _BAD_VALUES])
