"""`--describe` documents every setting from the declarations that validate it."""

import os
import subprocess
import sys

import ml_collections
import pytest

from fedsim_jax import algorithms
from fedsim_jax.config import FIELDS, base_config, describe, validate
from fedsim_jax.settings import ConfigError, allowed_values

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _leaves(config, prefix=''):
  for key, value in config.items():
    path = prefix + key
    if path.endswith('.kwargs') or path == 'run.eval_class_groups':
      continue
    if isinstance(value, ml_collections.ConfigDict):
      yield from _leaves(value, path + '.')
    else:
      yield path


def test_every_setting_of_the_base_config_is_declared_and_nothing_else():
  assert sorted(_leaves(base_config())) == sorted(FIELDS)


def test_every_declared_setting_says_what_it_allows_and_what_it_is():
  for path, (check, doc) in FIELDS.items():
    assert allowed_values(check), path
    assert doc.strip(), path


def test_the_declared_checks_are_the_ones_validate_applies():
  for path in FIELDS:
    config = base_config()
    node = config
    *parents, leaf = path.split('.')
    for part in parents:
      node = node[part]
    with node.unlocked():
      del node[leaf]  # a typed field refuses another type; a new one takes any
      node[leaf] = object()  # no check accepts this
    with pytest.raises(ConfigError, match=path.replace('.', r'\.')):
      validate(config)


def test_describe_lists_each_setting_with_its_value():
  config = base_config()
  config.client.learning_rate = 0.125
  text = describe(config)
  assert 'client.learning_rate = 0.125\n    local learning rate; allowed: a number > 0' in text
  for path in FIELDS:
    assert f'\n{path} = ' in '\n' + text
  # The selected models' settings with this config's values, then every registered one's.
  config.latency.kwargs.mean = 0.25
  text = describe(config)
  assert (
    '\nlatency.kwargs.mean = 0.25\n    mean seconds per local step; allowed: a number > 0' in text
  )
  assert "\nmodel.name='resnet18': " in text
  assert '\n  model.kwargs.hidden_sizes = (200, 200)\n' in text
  assert "\nlatency.name='per_step': " in text
  assert "\n  latency.kwargs.distribution = 'homogeneous'\n" in text
  assert '\n  availability.kwargs.period = 86400.0\n' in text


@pytest.mark.parametrize('name', algorithms.names())
def test_every_algorithm_setting_is_described(name):
  settings = algorithms.get_spec(name).settings()
  text = settings.describe(prefix='algorithm.kwargs.')
  for field in settings.field_names():
    assert f'algorithm.kwargs.{field} = ' in text
  assert 'allowed: any' not in text


def test_the_binary_describes_a_config_with_its_algorithm_defaults():
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(_REPO, 'experiments', 'run.py'),
      f'--config={os.path.join(_REPO, "configs", "fedavg_fashion_mnist.py")}',
      '--config.algorithm.name=fedyogi',
      '--describe',
    ],
    capture_output=True,
    text=True,
    cwd=_REPO,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  assert "algorithm.name = 'fedyogi'" in result.stdout
  assert 'algorithm.kwargs.server_learning_rate = 0.01' in result.stdout
  assert "run.on_divergence = 'stop'" in result.stdout
