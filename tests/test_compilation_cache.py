"""Compiled programs shared between runs: `run.compilation_cache` (fedsim_jax/compilation_cache)."""

import os
import stat
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from fedsim_jax import compilation_cache
from fedsim_jax.config import ConfigError, base_config, validate
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.experiment import run_experiment
from tests.helpers import make_tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def restore_process_cache():
  """Each test starts and ends with the suite's setting (conftest enables 'process')."""
  compilation_cache.enable('process')
  yield
  jax.config.update('jax_compilation_cache_dir', None)  # undo a test's own JAX setting
  compilation_cache.enable('off')
  compilation_cache.enable('process')


@pytest.fixture
def cache_hits():
  hits = []

  def listener(event, **kwargs):
    if event == '/jax/compilation_cache/cache_hits':
      hits.append(event)

  monitoring.register_event_listener(listener)
  yield hits
  monitoring.unregister_event_listener(listener)


def _fresh_function():
  """A new Python function each call, computing the same program: what a rebuilt run gives."""
  return jax.jit(lambda x: jnp.tanh(x) * 3.0 + jnp.sin(x))


def test_process_mode_uses_a_private_directory_and_caches_every_program():
  directory = compilation_cache.enable('process')
  assert jax.config.jax_compilation_cache_dir == directory
  assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
  assert compilation_cache.enable('process') == directory  # idempotent
  assert compilation_cache.in_use(directory) == 'process'


def test_a_rebuilt_function_loads_the_program_instead_of_compiling(cache_hits):
  compilation_cache.enable('process')
  x = jnp.linspace(0.0, 1.0, 37)
  first = _fresh_function()(x)
  assert not cache_hits
  second = _fresh_function()(x)
  assert len(cache_hits) == 1
  assert jnp.array_equal(first, second)


def test_off_restores_jax_defaults_and_stops_caching(cache_hits):
  compilation_cache.enable('off')
  assert jax.config.jax_compilation_cache_dir is None
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0  # JAX's default
  x = jnp.linspace(0.0, 1.0, 41)
  _fresh_function()(x)
  _fresh_function()(x)
  assert not cache_hits
  assert compilation_cache.in_use(None) == 'off'


def test_a_directory_is_created_and_kept(tmp_path, cache_hits):
  directory = tmp_path / 'nested' / 'xla'
  assert compilation_cache.enable(str(directory)) == str(directory)
  _fresh_function()(jnp.ones(43))
  assert os.listdir(directory)  # the program was written there
  assert compilation_cache.in_use(str(directory)) == str(directory)


def test_an_unusable_directory_is_a_one_line_error(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('not a directory')
  with pytest.raises(ValueError, match=r"run.compilation_cache=.*allowed: \('process', 'off'\)"):
    compilation_cache.enable(str(blocker / 'xla'))


def test_a_cache_configured_through_jax_is_left_alone(tmp_path):
  compilation_cache.enable('off')
  jax.config.update('jax_compilation_cache_dir', str(tmp_path))
  assert compilation_cache.enable('process') == str(tmp_path)
  assert compilation_cache.enable('off') == str(tmp_path)
  assert jax.config.jax_compilation_cache_dir == str(tmp_path)


@pytest.mark.parametrize('value', ['', '  ', None])
def test_invalid_setting_names_the_setting(value):
  config = base_config()
  config.run.compilation_cache = value
  with pytest.raises(
    ConfigError,
    match=r"run.compilation_cache=.*allowed values: 'process', "
    r"'off' or a directory path",
  ) as error:
    validate(config)
  assert '\n' not in str(error.value)


def _tiny_config(setting):
  return make_tiny_config('fedbuff', **{'run.compilation_cache': setting})


def test_runs_give_the_same_results_with_and_without_the_cache(tmp_path, cache_hits):
  fed = toy_federation(num_clients=6, num_classes=10, image_shape=(28, 28, 1))
  run_experiment(_tiny_config('off'), tmp_path / 'off', dataset=fed)
  assert not cache_hits
  for name in ('first', 'second'):  # the second run loads the first one's programs
    summary = run_experiment(_tiny_config('process'), tmp_path / name, dataset=fed)
  assert cache_hits
  assert summary['host']['compilation_cache'] == 'process'
  metrics = {
    name: (tmp_path / name / 'metrics.jsonl').read_text() for name in ('off', 'first', 'second')
  }
  assert metrics['off'] == metrics['first'] == metrics['second']


def test_binary_reports_an_unusable_directory_in_one_line(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('x')
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, 'experiments', 'run.py'),
      f'--config={os.path.join(ROOT, "configs", "fedavg_fashion_mnist.py")}',
      f'--config.run.compilation_cache={blocker / "xla"}',
      f'--workdir={tmp_path / "run"}',
    ],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=ROOT,
    # Without the test session's shared cache (tests/conftest.py): a cache configured through
    # JAX's own variable takes precedence over the setting.
    env={k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'},
  )
  assert result.returncode != 0
  assert 'run.compilation_cache' in result.stderr and 'Traceback' not in result.stderr
  assert len([line for line in result.stderr.splitlines() if 'run.compilation_cache' in line]) == 1
