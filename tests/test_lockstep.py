"""Lockstep sweeps: several seeds run together give exactly the sequential runs' results."""

import functools

import pytest

from fedsim_jax.config import ConfigError, set_by_path
from fedsim_jax.experiment import run_experiment, run_experiments_lockstep
from tests.helpers import make_tiny_config, run_outputs


def _config(data_dir, seed, algorithm='fedavg', backend='vmap'):
  overrides = {
    'seed': seed,
    'partition.kwargs.min_client_size': 5,
    'latency.kwargs.distribution': 'exponential',
    'latency.kwargs.jitter': 0.1,
    'executor.backend': backend,
    'run.num_rounds': 6,
  }
  if algorithm != 'fedcompass':
    overrides['client.local_steps'] = 4
  slots = 5 if algorithm == 'fedavg' else 3
  return make_tiny_config(algorithm, data_dir, clients=5, slots=slots, **overrides)


def _schedule(row):
  return row['version'], row['virtual_time'], row['client_updates'], row['gradient_steps']


@pytest.mark.parametrize(
  'algorithm, backend',
  [
    ('fedavg', 'vmap'),
    # In `make test-slow` (21 s each): shared batches are covered by fedavg on vmap, FedBuff's
    # and FedCompass's asynchronous lockstep by their loop cases.
    pytest.param('fedbuff', 'vmap', marks=pytest.mark.slow),
    pytest.param('fedcompass', 'vmap', marks=pytest.mark.slow),
    ('fedbuff', 'loop'),
    ('fedcompass', 'loop'),
  ],
)
def test_lockstep_runs_equal_sequential_runs(digits_data_dir, tmp_path, algorithm, backend):
  seeds = (0, 1, 2)
  configs = [_config(digits_data_dir, s, algorithm, backend) for s in seeds]
  for seed, config in zip(seeds, configs):
    run_experiment(config, tmp_path / f'sequential{seed}')
  summaries = run_experiments_lockstep(
    [_config(digits_data_dir, s, algorithm, backend) for s in seeds],
    [tmp_path / f'lockstep{s}' for s in seeds],
  )
  assert len(summaries) == 3
  lockstep = summaries[0]['host']['lockstep']
  assert lockstep['simulations'] == 3
  if backend == 'loop':
    # Each simulation keeps its own executor and runs beside the others: bit-identical.
    assert lockstep['execution'] == 'concurrent'
    for seed in seeds:
      assert run_outputs(tmp_path / f'lockstep{seed}') == run_outputs(
        tmp_path / f'sequential{seed}'
      )
    return
  alone = sum(run_outputs(tmp_path / f'sequential{s}')[1]['executor_batches'] for s in seeds)
  assert lockstep['execution'] == 'shared_batches' and lockstep['shared_batches'] < alone
  for seed in seeds:
    (lock_rows, lock_summary), (seq_rows, seq_summary) = (
      run_outputs(tmp_path / f'lockstep{seed}'),
      run_outputs(tmp_path / f'sequential{seed}'),
    )
    # Scheduling is identical; arithmetic can differ in the last bits when XLA picks another
    # matrix-multiply path for a larger shared batch (see fedsim_jax.runtime.lockstep).
    assert [_schedule(r) for r in lock_rows] == [_schedule(r) for r in seq_rows]
    for a, b in zip(lock_rows, seq_rows):
      assert a['test_loss'] == pytest.approx(b['test_loss'], rel=1e-5)
      assert a['test_accuracy'] == pytest.approx(b['test_accuracy'], abs=2e-3)
    assert lock_summary['tasks'] == seq_summary['tasks']
  assert run_outputs(tmp_path / 'sequential0') != run_outputs(tmp_path / 'sequential1')


@pytest.mark.parametrize(
  ('path', 'value'), [('client.local_steps', 2), ('algorithm.kwargs.cohort_size', 3)]
)
def test_lockstep_configs_must_differ_only_in_seeds(digits_data_dir, tmp_path, path, value):
  # Seeds and numeric hyperparameters may differ (tests/test_lockstep_hyperparameters.py).
  other = _config(digits_data_dir, 1)
  set_by_path(other, path, value)
  with pytest.raises(ConfigError, match='differ only in seed'):
    run_experiments_lockstep([_config(digits_data_dir, 0), other], [tmp_path / 'a', tmp_path / 'b'])


class _FakeSimulation:
  """Advances one server version per step up to the stop's `max_versions`, calling
  `on_version` after each, as a `Simulation` run in pieces does."""

  def __init__(self, log, name, fail=False):
    self.log, self.name, self.fail = log, name, fail
    self.version = 0
    self.on_version = None

  def run(self, stop):
    while self.version < stop.max_versions:
      self.version += 1
      self.log.append(f'{self.name} version {self.version}')
      if self.on_version is not None:
        self.on_version(self)
      if self.fail and self.version == 2:
        raise ValueError(f'{self.name} failed')
    return self.name


def _drivers(sims, versions):
  from fedsim_jax.runtime.simulation import StopCondition

  return [functools.partial(sim.run, StopCondition(max_versions=versions)) for sim in sims]


def test_concurrent_sweeps_start_the_others_after_the_first_version():
  from fedsim_jax.runtime.lockstep import run_concurrently

  log = []
  sims = [_FakeSimulation(log, f's{i}') for i in range(4)]
  assert run_concurrently(_drivers(sims, 3), sims[0]) == ['s0', 's1', 's2', 's3']
  assert log[0] == 's0 version 1'  # the others wait for the first version
  assert sorted(log) == sorted(f's{i} version {v}' for i in range(4) for v in (1, 2, 3))
  assert [sim.version for sim in sims] == [3] * 4
  assert sims[0].on_version is None  # the hook that started the others is gone


def test_concurrent_sweeps_respect_a_zero_version_budget():
  from fedsim_jax.runtime.lockstep import run_concurrently

  log = []
  sims = [_FakeSimulation(log, f's{i}') for i in range(2)]
  assert run_concurrently(_drivers(sims, 0), sims[0]) == ['s0', 's1']
  assert log == []


@pytest.mark.parametrize('failing', [0, 2])
def test_concurrent_sweeps_reraise_a_simulation_error(failing):
  from fedsim_jax.runtime.lockstep import run_concurrently

  log = []
  sims = [_FakeSimulation(log, f's{i}', fail=i == failing) for i in range(3)]
  with pytest.raises(ValueError, match=f's{failing} failed'):
    run_concurrently(_drivers(sims, 3), sims[0])
