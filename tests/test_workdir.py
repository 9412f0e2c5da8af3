"""A run never damages another run's outputs: workdirs are checked, locked, and written
atomically."""

import json
import os
import subprocess
import sys

import pytest

from fedsim_jax import workdir as workdir_lib
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import run_experiment
from fedsim_jax.metrics import MetricsWriter, read_metrics, write_json


def _snapshot(path):
  return {
    os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), 'rb').read()
    for root, _, names in os.walk(path)
    for name in names
    if name != workdir_lib.LOCK_FILE
  }


def test_a_workdir_holding_a_run_is_refused_and_left_untouched(
  tiny_config, digits_data_dir, tmp_path
):
  config = tiny_config('fedavg', digits_data_dir)
  run_experiment(config, tmp_path)
  before = _snapshot(tmp_path)
  with pytest.raises(ConfigError) as error:
    run_experiment(config, tmp_path)
  assert '--resume' in str(error.value) and '--overwrite' in str(error.value)
  assert _snapshot(tmp_path) == before


def test_overwrite_replaces_the_run(tiny_config, digits_data_dir, tmp_path):
  run_experiment(tiny_config('fedavg', digits_data_dir, **{'run.num_rounds': 6}), tmp_path)
  summary = run_experiment(tiny_config('fedavg', digits_data_dir), tmp_path, overwrite=True)
  assert summary['final_version'] == 4
  rows = read_metrics(tmp_path / 'metrics.jsonl')
  assert [row['version'] for row in rows] == [0, 2, 4]


def test_invalid_config_after_the_data_load_leaves_a_finished_run_intact(
  tiny_config, digits_data_dir, tmp_path
):
  run_experiment(tiny_config('fedavg', digits_data_dir), tmp_path)
  before = _snapshot(tmp_path)
  # Valid on its own; invalid only against the federation (more slots than clients).
  bad = tiny_config('fedavg', digits_data_dir, clients=6, slots=9)
  with pytest.raises(ConfigError):
    run_experiment(bad, tmp_path, overwrite=True)
  assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
  'make, message',
  [
    (lambda tmp: tmp / 'file', 'is a file'),
    (lambda tmp: tmp / 'file' / 'under', 'lies under the file'),
    (lambda tmp: tmp / ('x' * 300), 'longer than 255 bytes'),
    (lambda tmp: '', 'allowed values: a directory path'),
  ],
)
def test_unusable_workdirs_are_one_line_errors(tmp_path, make, message):
  (tmp_path / 'file').write_text('not a directory')
  with pytest.raises(ConfigError, match=message) as error:
    workdir_lib.check(make(tmp_path))
  assert '\n' not in str(error.value)


@pytest.mark.skipif(os.geteuid() == 0, reason='root may write anywhere')
def test_an_unwritable_workdir_is_refused(tmp_path):
  locked = tmp_path / 'locked'
  locked.mkdir()
  locked.chmod(0o500)
  try:
    with pytest.raises(ConfigError, match='is not writable'):
      workdir_lib.check(locked / 'run')
  finally:
    locked.chmod(0o700)


def test_resume_and_overwrite_exclude_each_other(tmp_path):
  with pytest.raises(ConfigError, match='exclude each other'):
    workdir_lib.check(tmp_path, resume=True, overwrite=True)


def test_a_second_process_cannot_write_into_a_workdir_in_use(tmp_path):
  lock = workdir_lib.WorkdirLock(tmp_path)
  try:
    probe = subprocess.run(
      [
        sys.executable,
        '-c',
        'import sys\n'
        'from fedsim_jax.workdir import WorkdirLock\n'
        'from fedsim_jax.settings import ConfigError\n'
        'try:\n'
        f'  WorkdirLock({str(tmp_path)!r})\n'
        'except ConfigError as e:\n'
        '  print(e); sys.exit(2)\n',
      ],
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert probe.returncode == 2, probe.stderr
    assert f'in use by a running run (pid {os.getpid()})' in probe.stdout
  finally:
    lock.release()
  workdir_lib.WorkdirLock(tmp_path).release()  # free again once released


def test_json_files_are_replaced_atomically(tmp_path, monkeypatch):
  path = tmp_path / 'summary.json'
  write_json(path, {'status': 'completed'})

  def fail(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(json, 'dump', fail)
  with pytest.raises(OSError, match='No space'):
    write_json(path, {'status': 'other'})
  assert json.loads(path.read_text()) == {'status': 'completed'}  # the old file, whole
  assert os.listdir(tmp_path) == ['summary.json']  # no temporary left behind


def test_a_torn_last_metrics_line_is_skipped_with_a_warning(tmp_path, caplog):
  writer = MetricsWriter(tmp_path)
  writer.write({'version': 0})
  writer.write({'version': 1})
  writer.close()
  with open(tmp_path / 'metrics.jsonl', 'a') as f:
    f.write('{"version": 2, "test_acc')
  with caplog.at_level('WARNING'):
    rows = read_metrics(tmp_path / 'metrics.jsonl')
  assert rows == [{'version': 0}, {'version': 1}]
  assert 'torn last line' in caplog.text
  (tmp_path / 'metrics.jsonl').write_text('{"version": 0}\n{"vers\n{"version": 2}\n')
  with pytest.raises(ValueError, match='line 2 is not JSON'):
    read_metrics(tmp_path / 'metrics.jsonl')


def test_a_resumed_writer_rewrites_the_file_to_its_checkpointed_rows(tmp_path):
  (tmp_path / 'metrics.jsonl').write_text('{"version": 0}\n{"version": 1}\n{"version": 2, "x')
  writer = MetricsWriter(tmp_path, rows=[{'version': 0}])
  writer.write({'version': 1, 'again': True})
  writer.close()
  assert read_metrics(tmp_path / 'metrics.jsonl') == [{'version': 0}, {'version': 1, 'again': True}]


def test_writable_directory_problem_creates_or_says_why_not(tmp_path):
  nested = tmp_path / 'a' / 'b'
  assert workdir_lib.writable_directory_problem(str(nested)) is None and nested.is_dir()
  (tmp_path / 'file').write_text('x')
  assert workdir_lib.writable_directory_problem(str(tmp_path / 'file' / 'c')) == (
    'cannot create it (Not a directory)'
  )
  if os.geteuid() != 0:  # root may write anywhere
    locked = tmp_path / 'locked'
    locked.mkdir(mode=0o500)
    assert workdir_lib.writable_directory_problem(str(locked)) == 'it is not writable'
