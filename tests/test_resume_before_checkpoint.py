"""A run killed (SIGKILL) before its first checkpoint: what its workdir holds then, and that
`--resume` starts it again from the beginning to the run that was never stopped, bit for bit."""

import json
import os
import signal
import subprocess
import sys

import pytest

from fedsim_jax import workdir as workdir_lib
from fedsim_jax.experiment import run_experiment
from tests.test_resume import _REPO, _assert_same_run, _config, _config_file, _start

# The experiment binary with its first checkpoint replaced by a wait: the process says so on
# stdout and stays there, alive and holding its workdir, until it is killed.
_HALT_AT_FIRST_CHECKPOINT = """
import sys
import threading

from fedsim_jax.checkpointing import Checkpoints
from fedsim_jax.run import run_main


def halt(self, state, meta):
  print('checkpoint due at version', meta['version'], flush=True)
  threading.Event().wait()


Checkpoints.save = halt
sys.argv[0] = 'fedsim-run'
run_main()
"""

# The first checkpoint falls at version 4, after the evaluations of versions 0 and 3.
_EXTRA = {'algorithm.kwargs.ema_decay': 0.9, 'run.checkpoint_every': 4}


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_beginning(
  digits_data_dir, tmp_path
):
  reference = tmp_path / 'reference'
  run_experiment(_config(digits_data_dir, 'fedbuff', _EXTRA), reference)
  config_path = _config_file(tmp_path, digits_data_dir, 'fedbuff', _EXTRA)
  workdir = tmp_path / 'killed'
  with open(tmp_path / 'halted.stderr', 'w') as stderr:
    process = subprocess.Popen(
      [sys.executable, '-c', _HALT_AT_FIRST_CHECKPOINT, f'--config={config_path}',
       f'--workdir={workdir}'],
      cwd=_REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
    )  # fmt: skip
  line = process.stdout.readline()
  if not line:
    process.wait()
    pytest.fail(f'rc {process.returncode}:\n{(tmp_path / "halted.stderr").read_text()[-3000:]}')
  assert line == 'checkpoint due at version 4\n'
  # Halted where its first checkpoint was due: the outputs of versions 0 to 4 are written, no
  # checkpoint or model, a summary that says the run is running, and the run holds its workdir.
  written = ['.lock', 'config.json', 'metrics.jsonl', 'summary.json', 'tasks.jsonl', 'tensorboard']
  assert sorted(os.listdir(workdir)) == written
  assert json.loads((workdir / 'summary.json').read_text()) == {'status': 'running'}
  assert workdir_lib.in_use(workdir)
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert process.returncode == -signal.SIGKILL
  # Killed: the lock went with the process; what was written stays, the start of the run.
  assert sorted(os.listdir(workdir)) == written and not workdir_lib.in_use(workdir)
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert [row['version'] for row in rows] == [0, 3]
  reference_rows = (reference / 'metrics.jsonl').read_text().splitlines()
  assert rows == [json.loads(line) for line in reference_rows[:2]]
  tasks = (workdir / 'tasks.jsonl').read_text()
  assert tasks and (reference / 'tasks.jsonl').read_text().startswith(tasks)

  resumed = _start(config_path, workdir, '--resume')
  _, err = resumed.communicate(timeout=240)
  assert resumed.returncode == 0, err[-3000:]
  assert f'--resume: no checkpoint in {workdir}; starting from the beginning' in err
  _assert_same_run(workdir, reference)
