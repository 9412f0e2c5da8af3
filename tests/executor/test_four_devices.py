"""Four XLA:CPU devices in one process: the experiment binary runs to the one-device result,
and a thread pool too small for the devices is refused up front (`fedsim_jax.executor.cpu_pool`).

XLA:CPU launches a sharded program's partitions from its client thread pool; a launch blocks a
pool thread once its device holds 32 unfinished programs, and a collective needs a thread per
device at once. With XLA's default pool (max(cores, devices) threads), a run whose event loop
gets more than 32 programs ahead of the devices aborted after 40 s ("Termination timeout for all
reduce"): the FedAvg run below did in each of four tries on the 2-core CPU, and the burst of
aggregations below in each of three.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fedsim_jax.config import set_by_path
from fedsim_jax.configs import fedavg_fashion_mnist
from fedsim_jax.executor import cpu_pool
from fedsim_jax.experiment import run_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOUR_DEVICES = '--xla_force_host_platform_device_count=4'

# FedAvg on digits, evaluated only at the end: nothing waits for the devices in between, so the
# event loop runs dozens of rounds (a training batch and an aggregation each) ahead of them.
RUN = {
  'data.name': 'digits',
  'data.num_clients': 20,
  'algorithm.kwargs.cohort_size': 10,
  'client.local_steps': 20,
  'run.num_rounds': 60,
  'run.eval_every': 1000,
  'executor.backend': 'vmap',
}


def _binary(workdir, data_dir, env, *flags):
  overrides = {**RUN, 'data.data_dir': str(data_dir), 'executor.devices': 4}
  command = [
    sys.executable,
    '-m',
    'fedsim_jax.run',
    '--config=fedsim_jax.configs.fedavg_fashion_mnist',
    f'--workdir={workdir}',
    *(f'--config.{path}={value}' for path, value in overrides.items()),
    *flags,
  ]
  return subprocess.run(
    command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
  )


def _environment(**variables):
  env = {k: v for k, v in os.environ.items() if k not in ('PJRT_NPROC', 'NPROC')}
  return {**env, 'XLA_FLAGS': FOUR_DEVICES, 'JAX_PLATFORMS': 'cpu', **variables}


def _error_line(result):
  lines = [line for line in result.stderr.splitlines() if not line.startswith(('I', 'W'))]
  assert 'Traceback' not in result.stderr
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr[-3000:]
  return lines[0]


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


# In `make test-slow` (about 20 s): tests/executor/test_multidevice.py checks four devices
# against one in `make test`, through the executor rather than the binary.
@pytest.mark.slow
def test_the_binary_on_four_devices_gives_the_one_device_run(digits_data_dir, tmp_path):
  result = _binary(tmp_path / 'four', digits_data_dir, _environment())
  assert result.returncode == 0, result.stderr[-3000:]

  config = fedavg_fashion_mnist.get_config()
  for path, value in {**RUN, 'data.data_dir': str(digits_data_dir)}.items():
    set_by_path(config, path, value)
  run_experiment(config, tmp_path / 'one')

  got, want = _metrics(tmp_path / 'four'), _metrics(tmp_path / 'one')
  assert [r['version'] for r in got] == [r['version'] for r in want] == [0, 60]
  assert [r['test_accuracy'] for r in got] == [r['test_accuracy'] for r in want]
  for g, w in zip(got, want, strict=True):
    assert g['test_loss'] == pytest.approx(w['test_loss'], rel=1e-5)
    assert g['client_updates'] == w['client_updates']
  summary = json.loads((tmp_path / 'four' / 'summary.json').read_text())
  assert (summary['status'], summary['host']['devices']) == ('completed', 4)


# The aggregation an event loop runs after each round, back to back with nothing waiting: a
# weighted sum over a batch's task rows, sharded over the devices (a collective).
_BURST = textwrap.dedent("""
    import tempfile
    import jax, jax.numpy as jnp, numpy as np
    from fedsim_jax.data.synthetic import toy_federation
    from fedsim_jax.executor import ClientTask
    from fedsim_jax.experiment import PreparedRun
    from tests.helpers import make_tiny_config

    config = make_tiny_config('fedavg', clients=8)
    config.executor.backend = 'vmap'
    config.executor.devices = 4
    run = PreparedRun(config, tempfile.mkdtemp(), toy_federation(num_clients=8))
    assert jax.local_device_count() == 4
    params = run.simulation.params
    tasks = [ClientTask(client_id=c % 8, num_steps=1, seed=c, start_params=params)
             for c in range(12)]
    deltas = run.simulation.executor.run(tasks).deltas
    mesh = jax.tree_util.tree_leaves(deltas)[0].sharding.mesh
    weights = jax.device_put(jnp.full(12, 1 / 12), jax.NamedSharding(mesh, jax.P('tasks')))
    add_mean = jax.jit(lambda state, deltas, w: jax.tree_util.tree_map(
        lambda s, d: s + jnp.tensordot(w, d, axes=1), state, deltas))
    state = params
    for _ in range(600):
      state = add_mean(state, deltas, weights)
    mean = jax.tree_util.tree_map(
        lambda d: np.tensordot(np.full(12, 1 / 12), np.asarray(d, np.float64), axes=1), deltas)
    for got, start, step in zip(*map(jax.tree_util.tree_leaves, (state, params, mean))):
      np.testing.assert_allclose(got, np.asarray(start) + 600 * step, rtol=1e-4, atol=1e-4)
    print('OK')
""")


def test_a_burst_of_aggregations_over_four_devices_finishes(tmp_path):
  # With XLA's default pool of 4 threads this aborted ("Termination timeout for all reduce");
  # the pool `PreparedRun` reserves leaves the sum a thread per device.
  result = subprocess.run(
    [sys.executable, '-c', _BURST],
    cwd=ROOT,
    env=_environment(),
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert result.returncode == 0 and 'OK' in result.stdout, result.stderr[-3000:]


_EVALUATION = textwrap.dedent("""
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from fedsim_jax.data.synthetic import toy_federation
    from fedsim_jax.metrics import make_evaluator
    from fedsim_jax.metrics.evaluation import _on_one_device
    from fedsim_jax.models import get_model

    fed = toy_federation(num_clients=4)
    model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(16,))
    params = model.init(jax.random.PRNGKey(0))
    mesh = Mesh(np.array(jax.devices()), ('tasks',))
    replicated = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    copy = _on_one_device(replicated)
    for leaf, original in zip(jax.tree_util.tree_leaves(copy), jax.tree_util.tree_leaves(params)):
      assert leaf.sharding.device_set == {jax.devices()[0]}, leaf.sharding
      np.testing.assert_array_equal(leaf, original)
    evaluate = make_evaluator(model, fed.test_x, fed.test_y, batch_size=7)
    assert evaluate(replicated) == evaluate(params), (evaluate(replicated), evaluate(params))
    print('OK')
""")


def test_a_model_replicated_over_four_devices_is_evaluated_on_one(tmp_path):
  # Evaluated as a program over all four devices, it computed the same pass four times.
  result = subprocess.run(
    [sys.executable, '-c', _EVALUATION],
    cwd=ROOT,
    env=_environment(PJRT_NPROC='8'),
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert result.returncode == 0 and 'OK' in result.stdout, result.stderr[-3000:]


def test_a_pool_too_small_for_four_devices_is_refused_before_anything_is_written(
  digits_data_dir, tmp_path
):
  workdir = tmp_path / 'run'
  result = _binary(workdir, digits_data_dir, _environment(PJRT_NPROC='4'), '--quiet')
  assert result.returncode == 2, result.stderr[-3000:]
  line = _error_line(result)
  assert 'executor.devices=4 shards over 4 XLA:CPU devices' in line
  assert 'need 8 threads' in line and 'started with 4; allowed: ' in line
  assert 'PJRT_NPROC>=8' in line
  assert not workdir.exists() or list(workdir.iterdir()) == []


def test_a_lockstep_sweep_needs_a_pool_thread_per_device_for_each_simulation(
  digits_data_dir, tmp_path
):
  # Two seeds launch from two host threads: 3 threads per device, 12 for 4 devices.
  flags = ('--seeds=0,1', '--quiet')
  result = _binary(tmp_path / 'sweep', digits_data_dir, _environment(PJRT_NPROC='8'), *flags)
  assert result.returncode == 2, result.stderr[-3000:]
  line = _error_line(result)
  assert 'need 12 threads' in line and '(3 per device)' in line and 'PJRT_NPROC>=12' in line
  assert not (tmp_path / 'sweep').exists() or list((tmp_path / 'sweep').iterdir()) == []


@pytest.fixture
def jax_not_started(monkeypatch):
  """As in a process whose JAX backends have not started, with four CPU devices forced."""
  monkeypatch.setattr(cpu_pool, '_backends_started', lambda: False)
  monkeypatch.setattr(cpu_pool, 'cpu_cores', lambda: 2)
  monkeypatch.setenv('XLA_FLAGS', FOUR_DEVICES)
  for name in ('PJRT_NPROC', 'NPROC'):  # set first, so that what `reserve` sets is undone
    monkeypatch.setenv(name, '0')
    monkeypatch.delenv(name)


@pytest.mark.parametrize(
  'devices, host_threads, threads',
  [(4, 1, 8), (4, 2, 12), (2, 1, 4), (8, 1, 8)],  # 8 devices of a 4-device process: 4 here
)
def test_reserve_sizes_the_pool_before_jax_starts(jax_not_started, devices, host_threads, threads):
  cpu_pool.reserve(devices, host_threads)
  assert os.environ['PJRT_NPROC'] == str(threads)
  assert cpu_pool.pool_threads() == threads


@pytest.mark.parametrize('devices', [1, 0, True, '4', None])
def test_reserve_leaves_one_device_and_invalid_settings_alone(jax_not_started, devices):
  cpu_pool.reserve(devices)
  assert 'PJRT_NPROC' not in os.environ


def test_reserve_keeps_an_explicit_pool_size_and_check_refuses_it(jax_not_started, monkeypatch):
  monkeypatch.setenv('PJRT_NPROC', '5')
  cpu_pool.reserve(4)
  assert os.environ['PJRT_NPROC'] == '5'
  with pytest.raises(ValueError, match=r'need 8 threads .* started with 5; allowed: '):
    cpu_pool.check(4, 4)
  cpu_pool.check(4, 2)  # two of the process's devices: 4 threads suffice


def test_reserve_does_nothing_once_jax_has_started(monkeypatch):
  monkeypatch.setattr(cpu_pool, '_backends_started', lambda: True)
  monkeypatch.delenv('PJRT_NPROC', raising=False)
  cpu_pool.reserve(4)
  assert 'PJRT_NPROC' not in os.environ
