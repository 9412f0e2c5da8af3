"""Two local processes on jax.distributed (loopback coordinator, gloo, two CPU devices each)
run one experiment with its task axis sharded over all four devices: the metrics are those of
the one-process run, only process 0 writes the workdir, and a run checkpointed by one process
continues in two to the one-process result."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from fedsim_jax import load_run
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import run_experiment, validate
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each process runs this with the run's settings in FEDSIM_* environment variables, as a
# cluster launcher would set them. An audit hook records every write the process makes under the
# workdir (files opened for writing, folders made, renames, removals, from Python: orbax makes
# and renames each checkpoint's and model's folders from Python too) and prints them at the end.
_WORKER = """
import json
import os
import sys
from tests.helpers import make_tiny_config
from fedsim_jax.experiment import run_experiment

algorithm, data_dir, workdir, resume = sys.argv[1:]
watched = os.path.realpath(workdir)
writes = []
write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
changes = {  # event: (number of path arguments, index of their dir_fd)
  'os.mkdir': (1, 2), 'os.rename': (2, 2), 'os.remove': (1, 1), 'os.rmdir': (1, 1),
  'os.truncate': (1, None), 'os.link': (2, 2), 'os.symlink': (2, 2), 'os.chmod': (1, 2),
  'os.utime': (1, 3), 'shutil.rmtree': (1, None), 'shutil.copyfile': (2, None),
}

def full_path(path, dir_fd):
  path = os.fsdecode(path)
  if dir_fd is not None and dir_fd >= 0 and not os.path.isabs(path):
    path = os.path.join(os.readlink(f'/proc/self/fd/{dir_fd}'), path)
  return os.path.realpath(path)

def record_workdir_writes(event, args):
  if event == 'open':
    path, _, flags = args
    paths, dir_fd = ([path] if flags & write_flags else []), None
  elif event in changes:
    count, fd_index = changes[event]
    paths, dir_fd = args[:count], (args[fd_index] if fd_index is not None else None)
  else:
    return
  for path in paths:
    if isinstance(path, (str, bytes, os.PathLike)):
      path = full_path(path, dir_fd)
      if event == 'os.mkdir' and os.path.isdir(path):
        continue  # makedirs(exist_ok=True) of an existing folder: nothing is written
      if path == watched or path.startswith(watched + os.sep):
        writes.append(f'{event} {path}')

sys.addaudithook(record_workdir_writes)
config = make_tiny_config(algorithm, data_dir, clients=8)
config.run.distributed = True
config.executor.backend = 'vmap'
config.executor.devices = 4  # both processes' devices
summary = run_experiment(config, workdir, resume=resume == 'resume')
print('final', summary['final_accuracy'])
print('workdir writes', json.dumps(writes))
"""


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _workdir_writes(stdout):
  """The writes under the workdir a worker reported (see `_WORKER`)."""
  lines = [line for line in stdout.splitlines() if line.startswith('workdir writes ')]
  assert len(lines) == 1, stdout[-2000:]
  return json.loads(lines[0].removeprefix('workdir writes '))


def _final_params(workdir):
  import jax

  return [np.asarray(x) for x in jax.tree_util.tree_leaves(load_run(workdir).params['final'])]


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


@pytest.mark.parametrize('algorithm, resume', [('fedavg', ''), ('fedbuff', 'resume')])
def test_two_processes_give_the_one_process_run_and_only_process_0_writes(
  digits_data_dir, tmp_path, algorithm, resume
):
  reference = tmp_path / 'reference'
  config = make_tiny_config(algorithm, digits_data_dir, clients=8)
  config.executor.backend = 'vmap'
  run_experiment(config, reference)

  workdir = tmp_path / 'distributed'
  if resume:  # the first half in this one process, the rest in two
    config.run.num_rounds = 2
    run_experiment(config, workdir)
  port = _free_port()
  processes = []
  for process_id in (0, 1):
    scratch = tmp_path / f'tmp{process_id}'
    scratch.mkdir()
    env = dict(
      os.environ,
      XLA_FLAGS='--xla_force_host_platform_device_count=2',
      FEDSIM_COORDINATOR_ADDRESS=f'127.0.0.1:{port}',
      FEDSIM_NUM_PROCESSES='2',
      FEDSIM_PROCESS_ID=str(process_id),
      TMPDIR=str(scratch),
    )
    processes.append(
      subprocess.Popen(
        [sys.executable, '-c', _WORKER, algorithm, str(digits_data_dir), str(workdir), resume],
        cwd=_REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
    )
  outputs = [p.communicate(timeout=240) for p in processes]
  for process, (_, err) in zip(processes, outputs):
    assert process.returncode == 0, err[-3000:]

  got, want = _metrics(workdir), _metrics(reference)
  if resume:
    assert (workdir / 'tasks.jsonl').read_text() == (reference / 'tasks.jsonl').read_text()
  assert [r['test_accuracy'] for r in got] == [r['test_accuracy'] for r in want]
  for g, w in zip(got, want):
    assert g['test_loss'] == pytest.approx(w['test_loss'], rel=1e-5)
    assert g['client_updates'] == w['client_updates']
  summary = json.loads((workdir / 'summary.json').read_text())
  assert summary['status'] == 'completed'
  assert (summary['host']['devices'], summary['host']['processes']) == (4, 2)
  # Process 1 wrote into its own scratch folder only, and removed it.
  assert list((tmp_path / 'tmp1').iterdir()) == []
  finals = [[line for line in out.splitlines() if line.startswith('final')] for out, _ in outputs]
  assert finals[0] == finals[1] == [f'final {summary["final_accuracy"]}']
  # Process 1 wrote nothing into the workdir, not even for a moment; the hook saw process 0's.
  writes = [_workdir_writes(out) for out, _ in outputs]
  assert writes[1] == []
  written = {os.path.relpath(w.split(' ', 1)[1], workdir).split(os.sep)[0] for w in writes[0]}
  assert {'metrics.jsonl', 'summary.json', 'models'} <= written, sorted(written)
  # The saved final parameters are the one-process run's, to float32 rounding: the sharded
  # weighted sum adds the clients' updates in another order than one device does.
  got_params, want_params = _final_params(workdir), _final_params(reference)
  assert [p.shape for p in got_params] == [p.shape for p in want_params] != []
  for got, want in zip(got_params, want_params):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_process_id_beyond_the_process_count_is_refused():
  config = make_tiny_config('fedavg')
  config.run.distributed = True
  config.run.num_processes = 2
  config.run.process_id = 2
  with pytest.raises(ConfigError, match=r'run.process_id=2 is invalid .* allowed: 0..1'):
    validate(config)


@pytest.mark.parametrize(
  'path, value, message',
  [
    ('run.num_processes', 0, 'run.num_processes=0 is invalid'),
    ('run.process_id', -1, 'run.process_id=-1 is invalid'),
    ('run.coordinator_address', 'localhost', "run.coordinator_address='localhost' is invalid"),
    ('run.coordinator_address', 'localhost:99999', 'port 1..65535'),
  ],
)
def test_process_settings_are_checked(path, value, message):
  # (booleans of the wrong type are refused by the config's types: tests/test_faults.py)
  from fedsim_jax.config import set_by_path

  config = make_tiny_config('fedavg')
  set_by_path(config, path, value)
  with pytest.raises(ConfigError, match=message) as error:
    validate(config)
  assert 'allowed' in str(error.value) and '\n' not in str(error.value)


@pytest.mark.parametrize(
  'algorithm, field, value',
  [
    ('fedbuff', 'ema_warmup', 'adam'),
    ('fare_dust', 'ema_warmup', 'zero'),
    ('fednova_budget', 'fednova_rounding', 'round'),
    ('fedcompass_m', 'first_arrival_momentum', 'yes'),
    ('fedcompass', 'speed_momentum', float('nan')),
  ],
)
def test_new_algorithm_settings_are_checked(algorithm, field, value):
  config = make_tiny_config(algorithm)
  config.algorithm.kwargs[field] = value
  with pytest.raises(ConfigError, match=f'algorithm.kwargs.{field}=') as error:
    validate(config)
  assert 'allowed' in str(error.value)
