"""A lockstep sweep (`--seeds`) stops as each of its runs would alone: a seed that diverges ends
with its own summary while the others finish; SIGINT/SIGTERM checkpoint every seed and say how to
resume; a killed sweep resumes every seed to the sweep that was never stopped, bit for bit."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import build_federated_dataset, run_experiment, run_experiments_lockstep
from tests.test_resume import _REPO, _assert_same_run, _config, _config_file, _start

SEEDS = (0, 1, 2)
SEEDS_FLAG = f'--seeds={",".join(map(str, SEEDS))}'


def _configs(data_dir, algorithm, extra):
  return [_config(data_dir, algorithm, {**extra, 'seed': seed}) for seed in SEEDS]


def _reference_sweep(data_dir, root, algorithm, extra):
  """The sweep that is never stopped, run in this process."""
  run_experiments_lockstep(_configs(data_dir, algorithm, extra), [root / f'seed{s}' for s in SEEDS])


def _summary(workdir):
  with open(os.path.join(workdir, 'summary.json')) as f:
    return json.load(f)


def _newest_checkpoint(workdir):
  directory = os.path.join(workdir, 'checkpoints')
  steps = [int(n) for n in os.listdir(directory) if n.isdigit()] if os.path.isdir(directory) else []
  return max(steps, default=-1)


def _wait_for_checkpoints(process, workdir, step, timeout=180):
  """Waits until every seed of the sweep in `workdir` has written checkpoint `step` (orbax
  renames a complete one into place; older ones may already be deleted)."""
  deadline = time.monotonic() + timeout
  while any(_newest_checkpoint(workdir / f'seed{s}') < step for s in SEEDS):
    if process.poll() is not None:
      _, err = process.communicate()
      pytest.fail(
        f'the sweep ended before checkpoint {step}: rc {process.returncode}\n{err[-2000:]}'
      )
    if time.monotonic() > deadline:
      process.kill()
      pytest.fail(f'no checkpoint {step} in every seed after {timeout}s')
    time.sleep(0.005)


def _float_federation(config, poisoned):
  """The config's federation with float features in [0, 1], or NaN features if `poisoned`."""
  federation = build_federated_dataset(config)
  x = federation.train_x.astype(np.float32)
  x = np.full_like(x, np.nan) if poisoned else x * np.float32(1 / 255)
  return dataclasses.replace(federation, train_x=x)


# The stop of one seed is the lifecycle's, whatever the backend: vmap's in `make test-slow`.
@pytest.mark.parametrize('backend', ['loop', pytest.param('vmap', marks=pytest.mark.slow)])
def test_a_diverging_seed_ends_with_its_own_summary_and_the_others_finish(
  digits_data_dir, tmp_path, backend
):
  extra = {'executor.backend': backend, 'run.num_rounds': 8}
  configs = _configs(digits_data_dir, 'fedavg', extra)
  # Seed 1 trains on NaN features: its model diverges at its first evaluation after version 0.
  datasets = [_float_federation(c, poisoned=c.seed == 1) for c in configs]
  workdirs = [tmp_path / f'seed{s}' for s in SEEDS]
  summaries = run_experiments_lockstep(configs, workdirs, datasets)
  assert [s['status'] for s in summaries] == ['completed', 'diverged', 'completed']
  assert summaries[1]['message'].startswith('diverged at version 3 (')
  assert [_summary(w)['status'] for w in workdirs] == ['completed', 'diverged', 'completed']
  assert _summary(workdirs[1])['message'] == summaries[1]['message']
  assert os.listdir(workdirs[1] / 'checkpoints') == ['0']  # its checkpoint at version 2
  # The healthy seeds ran to their end as they would have alone.
  for seed in (0, 2):
    assert summaries[seed]['final_version'] == 8
    alone = tmp_path / f'alone{seed}'
    run_experiment(configs[seed], alone, datasets[seed])
    if backend == 'loop':
      _assert_same_run(workdirs[seed], alone)
    else:  # shared batches: the same schedule (see test_lockstep.py)
      assert summaries[seed]['tasks'] == _summary(alone)['tasks']


def test_a_sweep_whose_seeds_diverge_exits_3_with_a_line_per_seed(digits_data_dir, tmp_path):
  extra = {'client.learning_rate': 1e30, 'run.num_rounds': 6}
  config_path = _config_file(tmp_path, digits_data_dir, 'fedavg', extra)
  workdir = tmp_path / 'sweep'
  process = _start(config_path, workdir, SEEDS_FLAG, '--quiet')
  _, err = process.communicate(timeout=300)
  assert process.returncode == 3, err[-3000:]
  assert 'Traceback' not in err
  lines = [line for line in err.splitlines() if line.startswith('error: ')]
  assert len(lines) == len(SEEDS)
  for seed, line in zip(SEEDS, lines):
    summary = _summary(workdir / f'seed{seed}')
    assert summary['status'] == 'diverged'
    assert line == f'error: {workdir / f"seed{seed}"}: {summary["message"]}'
    assert 'diverged at version 3' in line and 'client.learning_rate=1e+30' in line


# The binary, with every seed held after its first checkpoint until the file argv[1] exists:
# a signal sent while all are held lands mid-run, whatever the machine's speed.
_HOLD_AFTER_FIRST_CHECKPOINT = """
import os
import sys
import time

from fedsim_jax.checkpointing import Checkpoints
from fedsim_jax.run import run_main

release = sys.argv.pop(1)
save, held = Checkpoints.save, set()


def save_then_hold(self, state, meta):
  step = save(self, state, meta)
  if self.directory not in held:
    held.add(self.directory)
    print('held after checkpoint', step, flush=True)
    while not os.path.exists(release):
      time.sleep(0.005)
  return step


Checkpoints.save = save_then_hold
sys.argv[0] = 'fedsim-run'
run_main()
"""


# Both signals take one path (`interrupts.stop_requests`); single runs test both in `make test`.
@pytest.mark.parametrize(
  'signum, code', [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)]
)
def test_an_interrupted_sweep_checkpoints_every_seed_says_how_to_resume_and_resumes(
  digits_data_dir, tmp_path, signum, code
):
  extra = {'algorithm.kwargs.ema_decay': 0.9}
  reference = tmp_path / 'reference'
  _reference_sweep(digits_data_dir, reference, 'fedbuff', extra)
  config_path = _config_file(tmp_path, digits_data_dir, 'fedbuff', extra)
  workdir = tmp_path / 'interrupted'
  release = tmp_path / 'release'
  process = subprocess.Popen(
    [sys.executable, '-c', _HOLD_AFTER_FIRST_CHECKPOINT, str(release), f'--config={config_path}',
     f'--workdir={workdir}', SEEDS_FLAG],
    cwd=_REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
  )  # fmt: skip
  for _ in SEEDS:
    line = process.stdout.readline()
    if not line:
      _, err = process.communicate()
      pytest.fail(f'the sweep ended before every seed checkpointed: rc {process.returncode}\n{err}')
    assert line.startswith('held after checkpoint')
  process.send_signal(signum)
  time.sleep(0.5)  # for the handler to pause every seed; a seed released before it still stops
  release.touch()
  _, err = process.communicate(timeout=120)
  assert process.returncode == code, err[-3000:]
  assert 'Traceback' not in err
  last_line = err.strip().splitlines()[-1]
  assert last_line.startswith('interrupted: checkpoints written; resume with the same command')
  assert all(str(workdir / f'seed{s}') in last_line for s in SEEDS)
  summaries = [_summary(workdir / f'seed{s}') for s in SEEDS]
  # A seed ahead of the others may have finished before the signal: it stays completed.
  interrupted = [
    (s, summary) for s, summary in zip(SEEDS, summaries) if summary['status'] != 'completed'
  ]
  assert interrupted
  for seed, summary in interrupted:
    assert summary['status'] == 'interrupted' and summary['signal'] == signum
    assert summary['final_version'] < 24
    assert _newest_checkpoint(workdir / f'seed{seed}') == 1  # the interrupt's own, after step 0
  resumed = _start(config_path, workdir, SEEDS_FLAG, '--resume')
  _, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-3000:]
  for seed in SEEDS:
    _assert_same_run(workdir / f'seed{seed}', reference / f'seed{seed}')


# (algorithm, backend, extra settings): the loop backend is the CPU default; vmap shares batches.
KILL_CASES = {
  'fedbuff_ema_loop': ('fedbuff', 'loop', {'algorithm.kwargs.ema_decay': 0.9}),
  'fedcompass_loop': ('fedcompass', 'loop', {}),
  'fedbuff_ema_vmap': ('fedbuff', 'vmap', {'algorithm.kwargs.ema_decay': 0.9}),
}


# The vmap case (shared batches, whose checkpoints hold every seed's share) runs in `make test`;
# the loop cases in `make test-slow`: a sweep on the loop backend resumes from checkpoints in
# `make test` after an interrupt (above), and killed single runs in tests/test_resume.py.
@pytest.mark.parametrize(
  'case',
  [
    case if case == 'fedbuff_ema_vmap' else pytest.param(case, marks=pytest.mark.slow)
    for case in sorted(KILL_CASES)
  ],
)
def test_a_killed_sweep_resumes_every_seed_to_the_uninterrupted_sweep_bit_for_bit(
  digits_data_dir, tmp_path, case
):
  algorithm, backend, extra = KILL_CASES[case]
  extra = {**extra, 'executor.backend': backend}
  reference = tmp_path / 'reference'
  _reference_sweep(digits_data_dir, reference, algorithm, extra)
  config_path = _config_file(tmp_path, digits_data_dir, algorithm, extra)
  workdir = tmp_path / 'killed'
  rng = np.random.default_rng(sorted(KILL_CASES).index(case))
  process = _start(config_path, workdir, SEEDS_FLAG)
  _wait_for_checkpoints(process, workdir, step=int(rng.integers(1, 4)))
  time.sleep(rng.uniform(0, 0.05))  # anywhere: mid-event, mid-write of a line or checkpoint
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert process.returncode == -signal.SIGKILL
  resumed = _start(config_path, workdir, SEEDS_FLAG, '--resume')
  _, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-3000:]
  assert err.count('resumed from checkpoint') == len(SEEDS)
  for seed in SEEDS:
    _assert_same_run(workdir / f'seed{seed}', reference / f'seed{seed}')


def test_a_sweep_refuses_a_seed_workdir_that_holds_a_run_before_writing_any(
  digits_data_dir, tmp_path
):
  configs = _configs(digits_data_dir, 'fedavg', {'run.num_rounds': 2})
  run_experiment(configs[1], tmp_path / 'seed1')
  before = sorted(os.listdir(tmp_path / 'seed1'))
  with pytest.raises(ConfigError, match='seed1 already holds a run; pass --resume'):
    run_experiments_lockstep(configs, [tmp_path / f'seed{s}' for s in SEEDS])
  assert not (tmp_path / 'seed0').exists()
  assert sorted(os.listdir(tmp_path / 'seed1')) == before
