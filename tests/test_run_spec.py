"""The run specification: a config resolved once, at the edge, into typed frozen settings that
everything below the edge reads (`fedsim_jax.run_spec`)."""

import dataclasses
import json
import os
import sys

import ml_collections
import pytest

from fedsim_jax import config as config_lib
from fedsim_jax.run_settings import ClientSettings, RunSettings
from fedsim_jax.run_spec import RunSpec, as_spec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'goldens'))

from cases import SHIPPED_CONFIGS, load_config_file  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _keys(tree, prefix=''):
  """Every path of a nested dict, free sections' (kwargs) contents left out."""
  paths = set()
  for key, value in tree.items():
    path = f'{prefix}{key}'
    paths.add(path)
    if isinstance(value, dict) and key not in ('kwargs', 'eval_class_groups'):
      paths |= _keys(value, path + '.')
  return paths


@pytest.mark.parametrize('path', SHIPPED_CONFIGS, ids=os.path.basename)
def test_a_shipped_config_resolves_and_its_dict_reruns_it(path):
  config = load_config_file(path)
  spec = RunSpec.from_config(config)
  resolved = spec.to_dict()
  # Laid out as the config is, every field kept...
  assert _keys(resolved) == _keys(config.to_dict())
  for section in ('algorithm', 'partition', 'model', 'latency', 'availability'):
    assert resolved[section]['name'] == config[section].name
    assert resolved[section]['module'] == config[section].module
    # ...each plugin's settings complete: what the config gives, the rest at their defaults.
    assert config[section].kwargs.to_dict().items() <= resolved[section]['kwargs'].items()
  assert resolved['data']['num_clients'] == config.data.num_clients
  assert resolved['client'] == {name: config.client[name] for name in ClientSettings.field_names()}
  # What config.json holds resolves to the same spec (a rerun from it is the same run).
  written = json.loads(json.dumps(resolved))
  assert RunSpec.from_config(ml_collections.ConfigDict(written)) == spec


def test_spec_is_typed_and_frozen():
  config = config_lib.fashion_mnist_config('fedbuff')
  config.run.eval_class_groups.low = (0, 1)
  config.algorithm.kwargs.buffer_size = 7
  spec = RunSpec.from_config(config)
  assert isinstance(spec.run, RunSettings) and spec.run.num_rounds == config.run.num_rounds
  assert spec.algorithm.name == 'fedbuff'
  assert spec.algorithm.settings.buffer_size == 7
  assert spec.eval_class_groups == (('low', (0, 1)),)
  assert spec.partition_seed == spec.seed
  assert spec.facts.num_clients == config.data.num_clients
  with pytest.raises(dataclasses.FrozenInstanceError):
    spec.seed = 1  # type: ignore[misc]
  assert as_spec(spec) is spec


def test_without_seeds_ignores_only_what_a_sweep_may_vary():
  base = config_lib.fashion_mnist_config('fedavg')
  other = base.copy_and_resolve_references()
  other.seed, other.data.partition_seed, other.run.eval_every = 7, 3, 2
  assert RunSpec.from_config(other).without_seeds() == RunSpec.from_config(base).without_seeds()
  other.client.learning_rate = 0.5
  assert RunSpec.from_config(other).without_seeds() != RunSpec.from_config(base).without_seeds()


def test_without_hyperparameters_ignores_the_named_numeric_hyperparameters_too():
  from fedsim_jax.run_spec import lockstep_hyperparameter_names

  base = config_lib.fashion_mnist_config('fedbuff')
  other = base.copy_and_resolve_references()
  other.seed, other.client.learning_rate, other.client.momentum = 7, 0.5, 0.5
  other.client.weight_decay = 1e-4
  other.algorithm.kwargs.update(server_learning_rate=0.3, server_momentum=0.5, staleness_a=1.0)
  other.algorithm.kwargs.proximal_strength = 0.01
  key = RunSpec.from_config(base).without_hyperparameters()
  assert RunSpec.from_config(other).without_hyperparameters() == key
  assert RunSpec.from_config(other).without_seeds() != RunSpec.from_config(base).without_seeds()
  other.client.batch_size = 16  # changes the programs' shapes
  assert RunSpec.from_config(other).without_hyperparameters() != key
  assert 'client.learning_rate' in lockstep_hyperparameter_names()
  assert 'algorithm.kwargs.server_learning_rate' in lockstep_hyperparameter_names()


@pytest.mark.parametrize(
  ('path', 'value', 'named'),
  [
    ('client.batch_size', 0, 'client.batch_size'),
    ('model.kwargs.hidden_sizes', 'wide', 'model.kwargs.hidden_sizes'),
    ('algorithm.kwargs.server_learning_rate', -1.0, 'algorithm.kwargs.server_learning_rate'),
    ('run.max_virtual_time', float('nan'), 'run.max_virtual_time'),
  ],
)
def test_an_invalid_setting_is_refused_naming_it(path, value, named):
  config = config_lib.fashion_mnist_config('fedavg')
  with config.unlocked():
    config_lib.set_by_path(config, path, value)
  with pytest.raises(config_lib.ConfigError, match=named.replace('.', r'\.')):
    RunSpec.from_config(config)
