"""Every stop of a single run is a clean stop, and no stop hides or loses results: a run never
deletes another's, a full disk or read-only folder ends it with one line and a resumable
workdir, an unfinished run never passes for a finished one, and resume repairs what its
checkpoint covers. Faults are injected deterministically (a patched function in the process that
meets them), never by timing."""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import fedsim_jax
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.analysis import compare as compare_lib
from fedsim_jax.analysis import measures
from fedsim_jax.analysis import plot as plot_lib
from fedsim_jax.analysis.run_files import load
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import PreparedRun, run_experiment
from tests.analysis.workdirs import write_workdir
from tests.helpers import make_tiny_config
from tests.test_resume import _assert_same_run

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TMP_MARK = '.orbax-checkpoint-tmp'


# --- helpers -------------------------------------------------------------------------------


def _config(data_dir, **overrides):
  return make_tiny_config(
    'fedavg',
    data_dir,
    **{'run.num_rounds': 8, 'run.eval_every': 2, 'run.checkpoint_every': 2, **overrides},
  )


def _config_file(tmp_path, data_dir, **overrides):
  settings = {'run.num_rounds': 8, 'run.eval_every': 2, 'run.checkpoint_every': 2, **overrides}
  path = tmp_path / 'config.py'
  path.write_text(
    textwrap.dedent(f"""
      from tests.helpers import make_tiny_config

      def get_config():
        return make_tiny_config('fedavg', {str(data_dir)!r}, **{settings!r})
    """),
    encoding='utf-8',
  )
  return path


def _binary(tmp_path, *flags, patch='', wait=True):
  """Runs `fedsim-run *flags` in a fresh process, after `patch` (Python source) has run in it:
  the hook that injects a fault. Returns the finished process (or the Popen with wait=False)."""
  driver = tmp_path / f'driver{len(list(tmp_path.glob("driver*")))}.py'
  driver.write_text(
    f'import sys\nsys.path.insert(0, {_REPO!r})\n'
    + textwrap.dedent(patch)
    + f'\nfrom fedsim_jax.run import run_main\nsys.argv = ["fedsim-run", *{list(flags)!r}]\n'
    'run_main()\n',
    encoding='utf-8',
  )
  process = subprocess.Popen(
    [sys.executable, str(driver)],
    cwd=_REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  if not wait:
    return process
  process.stdout_text, process.stderr_text = process.communicate(timeout=300)
  return process


def _one_line(process, prefix='error: '):
  """The one line the binary printed on stderr (log lines aside); no traceback."""
  stderr = process.stderr_text
  assert 'Traceback' not in stderr, stderr[-3000:]
  lines = [line for line in stderr.splitlines() if line and not line.startswith(('I', 'W'))]
  assert len(lines) == 1, stderr[-3000:]
  assert lines[0].startswith(prefix), lines[0]
  return lines[0]


def _leftovers(workdir):
  return [
    os.path.join(root, name)
    for root, dirs, files in os.walk(workdir)
    for name in dirs + files
    if _TMP_MARK in name
  ]


def _killed_after_checkpoint(config, workdir, version, resume=False):
  """Runs `config` in `workdir` until a checkpoint at `version` or later is written, then
  abandons it as a killed process would (its lock released, as the kernel does)."""
  prepared = PreparedRun(config, workdir, resume=resume)
  sim = prepared.simulation
  while True:
    sim.run(prepared.stop)
    if prepared._checkpoint_requested:
      prepared.save_checkpoint()
      if sim.version >= version:
        break
    assert not sim.finished(prepared.stop)
  prepared.writer.close()
  if prepared.task_trace is not None:
    prepared.task_trace.close()
  prepared._lock.release()


# --- a run never deletes another run's results ----------------------------------------------


def test_a_run_that_finishes_while_another_loads_its_data_is_refused_not_deleted(
  digits_data_dir, tmp_path
):
  """B starts into an empty workdir and is held in its data load (a hook waits for a file);
  A, started into the same workdir meanwhile, must be refused: B holds the workdir from its
  start, so that B cannot delete A's finished results when it goes on."""
  workdir = tmp_path / 'run'
  loading, go = tmp_path / 'loading', tmp_path / 'go'
  hold_the_data_load = f"""
    import os, time
    import fedsim_jax.build as build
    _build = build.build_federated_dataset
    def build_federated_dataset(config):
      open({str(loading)!r}, 'w').close()
      while not os.path.exists({str(go)!r}):
        time.sleep(0.01)
      return _build(config)
    build.build_federated_dataset = build_federated_dataset
  """
  config_path = _config_file(tmp_path, digits_data_dir, **{'run.num_rounds': 4})
  b = _binary(
    tmp_path,
    f'--config={config_path}',
    f'--workdir={workdir}',
    '--quiet',
    patch=hold_the_data_load,
    wait=False,
  )
  try:
    deadline = time.monotonic() + 120
    while not loading.exists():
      assert b.poll() is None, b.communicate()[1][-3000:]
      assert time.monotonic() < deadline, 'B never reached its data load'
      time.sleep(0.01)
    with pytest.raises(ConfigError, match='is in use by a running run'):
      run_experiment(_config(digits_data_dir, **{'run.num_rounds': 4}), workdir)
  finally:
    go.touch()
    _, err = b.communicate(timeout=300)
  assert b.returncode == 0, err[-3000:]
  assert json.loads((workdir / 'summary.json').read_text())['status'] == 'completed'
  # and once B has finished, a run into its workdir is refused as before
  with pytest.raises(ConfigError, match='already holds a run'):
    run_experiment(_config(digits_data_dir, **{'run.num_rounds': 4}), workdir)


def test_a_lock_file_that_another_run_removed_is_not_taken_as_held(tmp_path, monkeypatch):
  """A start-up that fails removes the workdir it created, lock file included; a run that had
  opened that lock file meanwhile must lock the workdir's new lock file, not the removed one."""
  workdir = tmp_path / 'w'
  first = workdir_lib.WorkdirLock(workdir)
  assert first.created
  open_lock_file = workdir_lib.WorkdirLock._open

  def open_then_the_first_run_gives_up(self, path):
    opened = open_lock_file(self, path)
    if not first._file.closed:
      first.abandon()
    return opened

  monkeypatch.setattr(workdir_lib.WorkdirLock, '_open', open_then_the_first_run_gives_up)
  second = workdir_lib.WorkdirLock(workdir)
  monkeypatch.undo()
  try:
    assert os.path.samefile(second._file.name, workdir / workdir_lib.LOCK_FILE)
    assert os.fstat(second._file.fileno()).st_ino == os.stat(second.path).st_ino
    with pytest.raises(ConfigError, match='is in use by a running run'):
      workdir_lib.WorkdirLock(workdir)
  finally:
    second.release()


# --- unfinished runs never pass for finished ones -------------------------------------------


def _sweep_of_every_status(root):
  """Seven runs of one algorithm: one completed and one of each way not to be."""
  points = [(0, 0, 0.1), (10, 100, 0.5), (20, 200, 0.7)]
  write_workdir(root / 'seed0', points, seed=0)
  write_workdir(root / 'seed1', points, seed=1, summary=False)  # killed before any summary
  for seed, status in ((2, 'interrupted'), (3, 'failed'), (4, 'diverged'), (5, 'running')):
    write_workdir(root / f'seed{seed}', points, seed=seed)
    (root / f'seed{seed}' / 'summary.json').write_text(json.dumps({'status': status}))
  # extended by --resume and killed, by a version that did not mark it running: the summary
  # says completed at version 2, metrics.jsonl goes on to version 4
  write_workdir(root / 'seed6', [*points, (30, 300, 0.9), (40, 400, 0.95)], seed=6)
  summary = json.loads((root / 'seed6' / 'summary.json').read_text())
  (root / 'seed6' / 'summary.json').write_text(json.dumps({**summary, 'final_version': 2}))


def test_load_reports_each_way_a_run_can_stand(tmp_path):
  _sweep_of_every_status(tmp_path)
  lock = workdir_lib.WorkdirLock(tmp_path / 'seed5')  # seed5 is running: a process holds it
  try:
    statuses = [load(tmp_path / f'seed{s}').status for s in range(7)]
  finally:
    lock.release()
  assert statuses == [
    'completed',
    'killed',
    'interrupted',
    'failed',
    'diverged',
    'running',
    'killed',
  ]
  assert load(tmp_path / 'seed5').status == 'killed'  # its process gone, 'running' is a lie


def test_compare_and_plot_leave_out_unfinished_runs_and_say_so(tmp_path, capsys):
  root = tmp_path / 'fedavg'
  _sweep_of_every_status(root)
  assert compare_lib.main([str(root)]) == 0
  out, err = capsys.readouterr()
  row = next(line for line in out.splitlines() if line.startswith('| fedavg'))
  assert row.split('|')[2].strip() == '1'  # one seed: the completed one
  assert '0.7000 ± 0.0000' in row  # and not seed6's 0.95
  notes = [line for line in err.splitlines() if line.startswith('fedsim-compare: unfinished run')]
  assert len(notes) == 6 and all('left out (--include_unfinished keeps it)' in n for n in notes)
  assert any(f'{root / "seed6"}: killed' in note for note in notes)

  assert compare_lib.main([str(root), '--include_unfinished']) == 0
  out, err = capsys.readouterr()
  row = next(line for line in out.splitlines() if line.startswith('| fedavg'))
  assert row.split('|')[2].strip() == '7 (6 unfinished)'
  assert 'unfinished' in out.split('\n\n')[1]  # the caption says what the count means

  assert plot_lib.main([str(root), '--kinds', 'accuracy', '--out', str(tmp_path / 'p')]) == 0
  _, err = capsys.readouterr()
  assert err.count('fedsim-plot: unfinished run') == 6


def test_compare_of_unfinished_runs_only_is_one_line_and_exit_2(tmp_path, capsys):
  write_workdir(tmp_path / 'killed', [(0, 0, 0.1), (10, 100, 0.5)], summary=False)
  assert compare_lib.main([str(tmp_path / 'killed')]) == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert err.startswith('fedsim-compare: error: no run has completed')
  assert '--include_unfinished' in err


def test_extending_a_finished_run_marks_it_running_at_once(digits_data_dir, tmp_path):
  run_experiment(_config(digits_data_dir, **{'run.num_rounds': 4}), tmp_path)
  assert fedsim_jax.load_run(tmp_path).status == 'completed'
  # extended to 8 versions and killed after the checkpoint at version 6
  _killed_after_checkpoint(_config(digits_data_dir), tmp_path, 6, resume=True)
  assert json.loads((tmp_path / 'summary.json').read_text())['status'] == 'running'
  assert fedsim_jax.load_run(tmp_path).status == 'killed'
  assert load(tmp_path).status == 'killed'
  summary = run_experiment(_config(digits_data_dir), tmp_path, resume=True)
  assert summary['status'] == 'completed' and summary['final_version'] == 8
  assert fedsim_jax.load_run(tmp_path).status == 'completed'


# --- resume repairs what its checkpoint covers ----------------------------------------------


def _truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 3)


@pytest.mark.parametrize(
  'damage, trace_kept',
  [
    (lambda w: _truncate(w / 'tasks.jsonl'), False),
    (lambda w: os.remove(w / 'tasks.jsonl'), False),
    (lambda w: (w / 'tasks.jsonl').open('a').write('{"client": 3, "sta'), True),  # torn
    (lambda w: _truncate(w / 'metrics.jsonl'), True),
    (lambda w: os.remove(w / 'metrics.jsonl'), True),
  ],
  ids=['tasks-truncated', 'tasks-missing', 'tasks-torn', 'metrics-truncated', 'metrics-missing'],
)
def test_resume_repairs_damaged_outputs_of_a_killed_run(
  digits_data_dir, tmp_path, caplog, damage, trace_kept
):
  config = _config(digits_data_dir)
  run_experiment(config, tmp_path / 'reference')
  workdir = tmp_path / 'run'
  _killed_after_checkpoint(config, workdir, 4)
  damage(workdir)
  with caplog.at_level('WARNING'):
    summary = run_experiment(config, workdir, resume=True)
  assert summary['status'] == 'completed'
  _assert_same_run(workdir, tmp_path / 'reference', with_trace=False)
  if trace_kept:
    assert (workdir / 'tasks.jsonl').read_text() == (
      tmp_path / 'reference' / 'tasks.jsonl'
    ).read_text()
  else:  # the trace before the checkpoint is lost: no trace at all, rather than part of one
    assert not (workdir / 'tasks.jsonl').exists()
    assert 'the run goes on without its task trace' in caplog.text
    # and the next resume (an extension) goes on without it too
    longer = _config(digits_data_dir, **{'run.num_rounds': 10})
    assert run_experiment(longer, workdir, resume=True)['final_version'] == 10
    assert not (workdir / 'tasks.jsonl').exists()


def test_resume_may_turn_the_task_trace_off(digits_data_dir, tmp_path, caplog):
  config = _config(digits_data_dir)
  run_experiment(config, tmp_path / 'reference')
  _killed_after_checkpoint(config, tmp_path / 'run', 4)
  without_trace = _config(digits_data_dir, **{'run.write_tasks': False})
  with caplog.at_level('WARNING'):
    summary = run_experiment(without_trace, tmp_path / 'run', resume=True)
  assert summary['status'] == 'completed'
  assert not (tmp_path / 'run' / 'tasks.jsonl').exists()
  assert 'run.write_tasks is off' in caplog.text
  ref = (tmp_path / 'reference' / 'metrics.jsonl').read_text()
  assert (tmp_path / 'run' / 'metrics.jsonl').read_text() == ref


# --- a full disk or read-only folder: one line, a resumable workdir --------------------------


def _fail_renames(monkeypatch, marker, code):
  """orbax finishes every checkpoint and model by renaming its temporary folder into place:
  make the renames into paths containing `marker` fail with OSError(`code`)."""
  from orbax.checkpoint._src.path import async_path

  rename = async_path.rename

  async def failing_rename(source, destination):
    if marker in str(destination):
      raise OSError(code, os.strerror(code), str(destination))
    return await rename(source, destination)

  monkeypatch.setattr(async_path, 'rename', failing_rename)


@pytest.mark.parametrize('code', [errno.ENOSPC, errno.EROFS], ids=['disk-full', 'read-only'])
@pytest.mark.parametrize('where', ['checkpoints/2', 'models/'], ids=['checkpoint', 'final-save'])
def test_an_output_that_cannot_be_written_ends_the_run_cleanly_and_resumably(
  digits_data_dir, tmp_path, monkeypatch, code, where
):
  config = _config(digits_data_dir)
  run_experiment(config, tmp_path / 'reference')
  workdir = tmp_path / 'run'
  with monkeypatch.context() as patched:
    _fail_renames(patched, os.path.join(str(workdir), where), code)
    summary = run_experiment(config, workdir)
  assert summary['status'] == 'failed'
  message = summary['message']
  assert '\n' not in message and os.strerror(code) in message
  assert os.path.join(str(workdir), where.rstrip('/')) in message
  assert '--resume' in message and 'error' in summary  # resumable: not a result
  on_disk = json.loads((workdir / 'summary.json').read_text())
  assert on_disk['status'] == 'failed' and on_disk['message'] == message
  assert _leftovers(workdir) == []
  assert fedsim_jax.load_run(workdir).status == 'failed'
  # the cause fixed, --resume continues to the run that never failed
  assert run_experiment(config, workdir, resume=True)['status'] == 'completed'
  _assert_same_run(workdir, tmp_path / 'reference', with_trace=False)


def test_a_full_disk_at_a_checkpoint_is_one_line_and_exit_2_from_the_binary(
  digits_data_dir, tmp_path
):
  workdir = tmp_path / 'run'
  config_path = _config_file(tmp_path, digits_data_dir)
  full_disk = f"""
    import errno, os
    from orbax.checkpoint._src.path import async_path
    _rename = async_path.rename
    async def rename(source, destination):
      if {os.path.join(str(workdir), 'checkpoints', '1')!r} in str(destination):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(destination))
      return await _rename(source, destination)
    async_path.rename = rename
  """
  flags = (f'--config={config_path}', f'--workdir={workdir}', '--quiet')
  result = _binary(tmp_path, *flags, patch=full_disk)
  assert result.returncode == 2
  line = _one_line(result)
  assert f'cannot write the checkpoint {workdir}/checkpoints/1: No space left on device' in line
  assert json.loads((workdir / 'summary.json').read_text())['status'] == 'failed'
  assert _leftovers(workdir) == []
  resumed = _binary(tmp_path, *flags, '--resume')
  assert resumed.returncode == 0, resumed.stderr_text[-3000:]
  assert json.loads((workdir / 'summary.json').read_text())['status'] == 'completed'


def _can_mount():
  probe = subprocess.run(
    ['unshare', '--mount', 'sh', '-c', 'mount -t tmpfs tmpfs /mnt'],
    capture_output=True,
    check=False,
  )
  return probe.returncode == 0


@pytest.mark.skipif(
  not sys.platform.startswith('linux') or not _can_mount(), reason='needs mount namespaces'
)
def test_a_read_only_checkpoint_folder_on_a_real_mount_is_one_line_and_resumable(
  digits_data_dir, tmp_path
):
  """A run killed after its first checkpoint is resumed with its checkpoint folder a read-only
  bind mount (in a private mount namespace, so that root cannot write it either): the error
  comes from orbax's own writer, not from a hook."""
  workdir = tmp_path / 'run'
  _killed_after_checkpoint(_config(digits_data_dir), workdir, 2)
  checkpoints = workdir / 'checkpoints'
  assert os.listdir(checkpoints) == ['0']
  config_path = _config_file(tmp_path, digits_data_dir)
  flags = [f'--config={config_path}', f'--workdir={workdir}', '--quiet', '--resume']
  mount = f'mount --bind {checkpoints} {checkpoints} && mount -o remount,bind,ro {checkpoints}'
  command = ' '.join([sys.executable, os.path.join(_REPO, 'experiments', 'run.py'), *flags])
  result = subprocess.run(
    ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', f'{mount} && exec {command}'],
    cwd=_REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  result.stderr_text = result.stderr
  assert result.returncode == 2, result.stderr[-3000:]
  line = _one_line(result)
  assert f'cannot write the checkpoint {checkpoints}/1: Read-only file system' in line
  assert json.loads((workdir / 'summary.json').read_text())['status'] == 'failed'
  assert os.listdir(checkpoints) == ['0']
  resumed = _binary(tmp_path, *flags)
  assert resumed.returncode == 0, resumed.stderr_text[-3000:]
  assert fedsim_jax.load_run(workdir).status == 'completed'


# --- signals during the final save and during start-up ---------------------------------------


@pytest.mark.parametrize('signals', [1, 2])
def test_ctrl_c_during_the_final_save(digits_data_dir, tmp_path, signals):
  """One SIGINT while the final models are written waits for them: the run completes. A second
  stops it at once: an interrupted run, with nothing half-written, that --resume completes."""
  workdir = tmp_path / 'run'
  config_path = _config_file(tmp_path, digits_data_dir)
  interrupt_the_save = f"""
    import os, signal
    import fedsim_jax.lifecycle.run_lifecycle as lifecycle
    _save_models = lifecycle.save_models
    def save_models(*args, **kwargs):
      for _ in range({signals}):
        os.kill(os.getpid(), signal.SIGINT)
      return _save_models(*args, **kwargs)
    lifecycle.save_models = save_models
  """
  flags = (f'--config={config_path}', f'--workdir={workdir}', '--quiet')
  result = _binary(tmp_path, *flags, patch=interrupt_the_save)
  assert 'Traceback' not in result.stderr_text, result.stderr_text[-3000:]
  assert _leftovers(workdir) == []
  summary = json.loads((workdir / 'summary.json').read_text())
  if signals == 1:
    assert result.returncode == 0, result.stderr_text[-3000:]
    assert summary['status'] == 'completed'
    assert set(fedsim_jax.load_run(workdir).params) == {'final', 'best'}
    return
  assert result.returncode == 130
  assert _one_line(result, 'interrupted: ').startswith('interrupted: checkpoint written')
  assert summary['status'] == 'interrupted' and summary['signal'] == signal.SIGINT
  resumed = _binary(tmp_path, *flags, '--resume')
  assert resumed.returncode == 0, resumed.stderr_text[-3000:]
  run = fedsim_jax.load_run(workdir)
  assert run.status == 'completed' and set(run.params) == {'final', 'best'}


_UNREADABLE_DATASET = """
  import errno, os
  from fedsim_jax.data import manifest
  def _sha256(path):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
  manifest._sha256 = _sha256
"""
_CTRL_C_IN_THE_DATA_LOAD = """
  import os, signal, time
  import fedsim_jax.build as build
  # As a binary started from a shell has it: a process started by a test worker that ignores
  # SIGINT (pytest-xdist's) inherits the ignore, and Python then raises no KeyboardInterrupt.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  def build_federated_dataset(config):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # a data load in progress: the KeyboardInterrupt arrives within it
  build.build_federated_dataset = build_federated_dataset
"""


@pytest.mark.parametrize(
  'case',
  ['ctrl-c', 'extra-argument', 'data-dir-is-a-file', 'unreadable-dataset', 'lock-is-a-folder'],
)
def test_start_up_faults_are_one_line_and_leave_the_workdir_as_it_was(
  digits_data_dir, tmp_path, case
):
  workdir = tmp_path / 'run'
  config_path = _config_file(tmp_path, digits_data_dir)
  flags = [f'--config={config_path}', f'--workdir={workdir}']
  patch, code, expected = '', 2, ''
  if case == 'ctrl-c':
    patch, code, expected = _CTRL_C_IN_THE_DATA_LOAD, 130, 'interrupted: stopped by SIGINT'
  elif case == 'extra-argument':
    flags.append('extra')
    expected = "error: unexpected argument 'extra'; allowed: flags only"
  elif case == 'data-dir-is-a-file':
    (tmp_path / 'file').write_text('')
    flags.append(f'--config.data.data_dir={tmp_path / "file"}')
    expected = f'error: data.data_dir={tmp_path / "file"} is a file; allowed values: a directory'
  elif case == 'unreadable-dataset':
    patch = _UNREADABLE_DATASET
    expected = f"error: dataset 'digits': cannot read {digits_data_dir}/digits/1.0.0/"
  else:
    (workdir / workdir_lib.LOCK_FILE).mkdir(parents=True)
    expected = f'error: --workdir={workdir}: {workdir}/.lock is not a lock file'
  result = _binary(tmp_path, *flags, patch=patch)
  assert result.returncode == code, result.stderr_text[-3000:]
  line = _one_line(result, expected)
  if case == 'unreadable-dataset':
    assert '(Permission denied)' in line
  if case == 'lock-is-a-folder':
    assert os.listdir(workdir) == [workdir_lib.LOCK_FILE]  # untouched
  else:
    assert not workdir.exists()  # nothing written, not even the lock


# --- run.on_divergence='continue': the best accuracy is the best finite model's --------------


def test_with_divergence_continued_the_best_accuracy_and_best_model_are_one_finite_model(
  digits_data_dir, tmp_path
):
  """The evaluation at version 2 reports a non-finite loss with an accuracy above every other
  (as a diverged model's garbage may): neither the summary's best nor the best model take it."""
  config = _config(digits_data_dir, **{'run.on_divergence': 'continue', 'run.num_rounds': 6})
  prepared = PreparedRun(config, tmp_path)
  evaluate = prepared._evaluate
  calls = []

  def garbage_at_version_2(params):
    metrics = dict(evaluate(params))
    calls.append(prepared.simulation.version)
    if prepared.simulation.version == 2:
      metrics.update(loss=float('inf'), accuracy=0.99)
    return metrics

  prepared._evaluate = garbage_at_version_2
  summary = prepared.run()
  assert calls == [2, 4, 6]
  rows = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
  assert [row.get('diverged', False) for row in rows] == [False, True, False, False]
  finite = [row['test_accuracy'] for row in rows if not row.get('diverged')]
  assert summary['best_accuracy'] == max(finite) < 0.99
  run = fedsim_jax.load_run(tmp_path)
  best = evaluate(run.params['best'])
  assert float(best['accuracy']) == pytest.approx(summary['best_accuracy'], abs=1e-6)
  assert measures.best_accuracy(load(tmp_path)) == summary['best_accuracy']
