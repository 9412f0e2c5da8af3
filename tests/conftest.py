"""Shared fixtures: small federations that build in milliseconds."""

import pytest

from fedsim_jax import compilation_cache
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation
from tests.helpers import make_tiny_config

# Every test shares compiled programs with the earlier tests of its worker, as runs of one
# process do by default (`run.compilation_cache = 'process'`): many tests build the same
# client, aggregation and evaluation programs afresh.
compilation_cache.enable('process')


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
