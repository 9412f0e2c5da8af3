"""A run that cannot fit in memory is refused before it starts, naming the setting."""

import pytest

from fedsim_jax import algorithms, memory_estimate
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import run_experiment

MB = 2**20


def _settings(name, **kwargs):
  return algorithms.get_spec(name).settings.from_kwargs(kwargs)


def _parts(settings, num_clients=100, data_bytes=0, training_at_once=2, **kwargs):
  """The estimate's parts by what they are, for a 1 MB model."""
  needs = memory_estimate.estimate(
    settings,
    num_clients=num_clients,
    model_bytes=MB,
    data_bytes=data_bytes,
    training_at_once=training_at_once,
    **kwargs,
  )
  return {need.what: need for need in needs}


def test_asynchronous_tasks_hold_their_start_models_and_a_batch_of_updates():
  parts = _parts(_settings('fedbuff', concurrency=50), data_bytes=7 * MB, max_batch_tasks=20)
  assert parts['client tasks in flight: start models'].nbytes == 50 * MB
  assert parts['client tasks in flight: start models'].setting == (
    'algorithm.kwargs.concurrency=50'
  )
  assert parts['client tasks in flight: computed updates'].nbytes == 20 * MB
  assert parts['training workspace (parameters, gradients, optimizer state)'].nbytes == 6 * MB
  assert parts['training data on the device'].nbytes == 7 * MB
  assert parts['server model and optimizer state'].nbytes == 4 * MB
  unbounded = _parts(_settings('fedbuff', concurrency=50))
  assert unbounded['client tasks in flight: computed updates'].nbytes == 50 * MB


@pytest.mark.parametrize('sums_in_chunks, held', [(True, 100), (False, 1000)])
def test_a_round_holds_one_start_model_and_its_updates_unless_summed_in_chunks(
  sums_in_chunks, held
):
  parts = _parts(
    _settings('fedavg', cohort_size=1000),
    num_clients=10_000,
    max_batch_tasks=100,
    sums_in_chunks=sums_in_chunks,
  )
  assert parts['client tasks per round: their start model'].nbytes == MB
  assert parts['client tasks per round: computed updates'].nbytes == held * MB


def test_the_vmap_backend_trains_a_whole_batch_at_once():
  def workspace(max_batch_tasks):
    parts = _parts(
      _settings('fedavg', cohort_size=10, num_selected=12),
      training_at_once=None,
      max_batch_tasks=max_batch_tasks,
    )
    assert parts['client tasks per round: computed updates'].setting == (
      'algorithm.kwargs.num_selected=12'
    )
    return parts['training workspace (parameters, gradients, optimizer state)'].nbytes

  assert workspace(None) == 36 * MB
  assert workspace(4) == 12 * MB


@pytest.mark.parametrize(
  'name, kwargs, copies',
  [
    ('moon', {}, 100),
    ('feddyn', {}, 100),
    ('asofed', {}, 200),
    ('ccfedavg', {}, 200),
    ('ccfedavg', {'storage': 'server'}, 100),
    ('fare_dust', {'history_length': 7}, 7),
  ],
)
def test_per_client_tables_and_histories_count(name, kwargs, copies):
  settings = _settings(name, **kwargs)
  tables = settings.client_tables(100)
  assert sum(table.copies for table in tables) == copies


def test_fedcompass_keeps_every_client_training():
  assert _settings('fedcompass').tasks_in_flight(37).copies == 37


def test_too_large_a_run_is_one_line_naming_the_largest_part():
  needs = [
    memory_estimate.Need('model.name', 1 * 2**30, 'server model'),
    memory_estimate.Need('algorithm.kwargs.concurrency=60000', 90 * 2**30, 'tasks in flight'),
  ]
  with pytest.raises(ConfigError) as error:
    memory_estimate.check_fits(needs, available=20 * 2**30)
  message = str(error.value)
  assert message.startswith('this run needs at least 91.0 GiB of memory, more than the 20.0 GiB')
  assert 'algorithm.kwargs.concurrency=60000 (tasks in flight) alone takes 90.0 GiB' in message
  assert 'a smaller algorithm.kwargs.concurrency' in message
  memory_estimate.check_fits(needs, available=None)  # unknown: not refused
  memory_estimate.check_fits(needs, available=100 * 2**30)


def test_the_run_is_refused_before_anything_is_written(
  tiny_config, digits_data_dir, tmp_path, monkeypatch
):
  monkeypatch.setattr(memory_estimate, 'available_bytes', lambda: 1000.0)
  with pytest.raises(ConfigError, match='run.check_memory=False'):
    run_experiment(tiny_config('fedbuff', digits_data_dir), tmp_path / 'run')
  assert not (tmp_path / 'run').exists()
  config = tiny_config('fedbuff', digits_data_dir, **{'run.check_memory': False})
  assert run_experiment(config, tmp_path / 'run')['status'] == 'completed'


def test_this_machine_reports_its_available_memory():
  available = memory_estimate.available_bytes()
  assert available is not None and available > 0
