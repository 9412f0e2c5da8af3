"""Shared fixtures: small federations that build in milliseconds; compiled programs shared
between tests."""

import atexit
import os
import shutil
import tempfile

import pytest

# The binaries and scripts that tests start share one compilation cache for the whole test
# session (JAX's own, through the environment they inherit): each would otherwise compile the
# same small programs again, most of a short run's time. The test processes themselves (the
# xdist workers inherit the variables) keep fedsim's 'process' cache below, which
# tests/test_compilation_cache.py checks, so the variables are set aside until JAX is imported.
_SHARED_CACHE = 'JAX_COMPILATION_CACHE_DIR'
_MIN_COMPILE_TIME = 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'
_inherited = {name: os.environ.pop(name, None) for name in (_SHARED_CACHE, _MIN_COMPILE_TIME)}

from fedsim_jax import compilation_cache  # noqa: E402 - after the variables are set aside
from fedsim_jax.data.federated import FederatedDataset  # noqa: E402
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation  # noqa: E402
from tests.helpers import make_tiny_config  # noqa: E402

# Every test shares compiled programs with the earlier tests of its worker, as runs of one
# process do by default (`run.compilation_cache = 'process'`): many tests build the same
# client, aggregation and evaluation programs afresh.
compilation_cache.enable('process')

if _inherited[_SHARED_CACHE] is None:  # the first process of the session: it owns the cache
  _inherited[_SHARED_CACHE] = tempfile.mkdtemp(prefix='fedsim-tests-xla-')
  atexit.register(shutil.rmtree, _inherited[_SHARED_CACHE], True)
os.environ[_SHARED_CACHE] = _inherited[_SHARED_CACHE]
os.environ[_MIN_COMPILE_TIME] = _inherited[_MIN_COMPILE_TIME] or '0'  # every program counts


@pytest.fixture
def tiny_config():
  """`make_tiny_config(algorithm, data_dir, clients=, slots=, **overrides)` (tests/helpers.py)."""
  return make_tiny_config


@pytest.fixture
def toy_federation() -> FederatedDataset:
  return make_toy_federation()


@pytest.fixture(scope='session')
def digits_data_dir(tmp_path_factory):
  """A data dir with scikit-learn digits prepared as a tfds array_record dataset."""
  from fedsim_jax.data.prepare import prepare

  data_dir = tmp_path_factory.mktemp('data')
  prepare('digits', data_dir)
  return data_dir


# Reproductions (`slow`, `make test-slow`) run for many minutes (the Shakespeare LSTM about 10 on
# two idle cores): each gets an hour, not the default timeout of pyproject.toml, unless it names
# its own with `@pytest.mark.timeout`.
SLOW_TEST_TIMEOUT = 3600


def pytest_collection_modifyitems(items):
  for item in items:
    if item.get_closest_marker('slow') and not item.get_closest_marker('timeout'):
      item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT))
