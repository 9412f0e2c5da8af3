"""Where a run's rows and summary go besides metrics.jsonl: an MLflow file store (read back with
MLflow's own client, across a kill and a resume) and writers of one's own through the public
API; invalid MLflow settings are one line before anything is written."""

import json
import os
import signal
import subprocess
import sys

import pytest

import fedsim_jax
from fedsim_jax.experiment import PreparedRun, run_experiment
from fedsim_jax.metrics.mlflow_writer import STATE_FILE
from fedsim_jax.metrics.writers import read_metrics
from fedsim_jax.settings import ConfigError
from tests.helpers import make_tiny_config


def _config(data_dir, tracking_uri, **overrides):
  settings = {
    'run.num_rounds': 8,
    'run.eval_every': 1,
    'run.checkpoint_every': 4,
    'run.mlflow': tracking_uri,
    'run.mlflow_experiment': 'writers-test',
    **overrides,
  }
  return make_tiny_config('fedavg', data_dir, **settings)


def _killed_at(config, workdir, version):
  """Runs `config` in `workdir` to `version` (past its checkpoint at 4), then abandons it as a
  killed process would: rows after the checkpoint are logged, its writers never end."""
  prepared = PreparedRun(config, workdir)
  sim = prepared.simulation
  on_version = sim.on_version

  def stop_at_version(s):
    on_version(s)
    if s.version == version:
      s.request_pause()

  sim.on_version = stop_at_version
  while sim.version < version:
    sim.run(prepared.stop)
    if prepared._checkpoint_requested:
      prepared.save_checkpoint()
  prepared.writer.close()
  prepared.task_trace.close()
  prepared._lock.release()


@pytest.fixture
def file_store_unset(monkeypatch):
  """MLFLOW_ALLOW_FILE_STORE unset for the test, and again after it."""
  monkeypatch.setenv('MLFLOW_ALLOW_FILE_STORE', 'false')  # (undone: unset again)
  monkeypatch.delenv('MLFLOW_ALLOW_FILE_STORE')


def _client(tracking_uri):
  from mlflow.tracking import MlflowClient

  return MlflowClient(tracking_uri=tracking_uri)


def test_mlflow_run_of_a_killed_and_resumed_run_holds_each_version_once(
  digits_data_dir, tmp_path, file_store_unset
):
  store = (tmp_path / 'mlruns').as_uri()
  config = _config(digits_data_dir, store)
  workdir = tmp_path / 'run'
  _killed_at(config, workdir, 6)
  first = json.loads((workdir / STATE_FILE).read_text())
  assert first['logged_through'] == 6  # rows 5 and 6 are logged, but not checkpointed
  assert os.environ['MLFLOW_ALLOW_FILE_STORE'] == 'true'  # set by the writer for a file store
  summary = run_experiment(config, workdir, resume=True)
  assert summary['status'] == 'completed'
  state = json.loads((workdir / STATE_FILE).read_text())
  assert state['run_id'] == first['run_id'] and state['logged_through'] == 8

  client = _client(store)
  (experiment,) = [e for e in client.search_experiments() if e.name == 'writers-test']
  (run,) = client.search_runs([experiment.experiment_id])
  assert run.info.run_id == state['run_id'] and run.info.status == 'FINISHED'
  rows = read_metrics(workdir / 'metrics.jsonl')
  assert [r['version'] for r in rows] == list(range(9))
  for name in ('test_accuracy', 'test_loss', 'virtual_time', 'client_updates'):
    history = sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(r['version'], r[name]) for r in rows], name
  params = run.data.params
  assert params['algorithm.name'] == 'fedavg' and params['run.num_rounds'] == '8'
  assert params['run.mlflow'] == store and params['model.kwargs.hidden_sizes'] == '[16]'
  metrics = run.data.metrics
  assert metrics['summary.final_accuracy'] == summary['final_accuracy']
  assert metrics['summary.best_accuracy'] == summary['best_accuracy']
  assert metrics['summary.host.processes_run'] == 2
  tags = run.data.tags
  assert tags['fedsim.status'] == 'completed' and tags['fedsim.workdir'] == str(workdir)
  assert tags['fedsim.code'] == str(summary['host']['code']['commit'] or '0.1.0')
  artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
  assert artifacts == {'clients.json', 'models'}


def _only_run(client):
  (run,) = client.search_runs([client.get_experiment_by_name('writers-test').experiment_id])
  return run


def test_an_interrupted_run_ends_its_mlflow_run_killed_and_its_resume_finishes_it(
  digits_data_dir, tmp_path, monkeypatch
):
  store = str(tmp_path / 'mlruns')  # a plain path is a file store too
  workdir = tmp_path / 'run'
  record = PreparedRun.record

  def interrupted_at_3(self, sim):  # Ctrl-C after the evaluation of version 3
    record(self, sim)
    if sim.version == 3:
      os.kill(os.getpid(), signal.SIGINT)

  with monkeypatch.context() as patch:
    patch.setattr(PreparedRun, 'record', interrupted_at_3)
    summary = run_experiment(_config(digits_data_dir, store, **{'run.num_rounds': 5}), workdir)
  assert summary['status'] == 'interrupted'
  client = _client(store)
  run = _only_run(client)
  assert run.info.status == 'KILLED' and run.data.tags['fedsim.status'] == 'interrupted'

  # resumed, and extended (params keep their first values: MLflow's cannot change)
  longer = _config(digits_data_dir, store, **{'run.num_rounds': 6})
  assert run_experiment(longer, workdir, resume=True)['status'] == 'completed'
  resumed = _only_run(client)
  assert resumed.info.run_id == run.info.run_id and resumed.info.status == 'FINISHED'
  assert resumed.data.tags['fedsim.status'] == 'completed'
  assert resumed.data.params['run.num_rounds'] == '5'
  history = client.get_metric_history(run.info.run_id, 'test_accuracy')
  assert sorted(m.step for m in history) == list(range(7))


class RecordingWriter(fedsim_jax.RunWriter):
  """A writer of one's own: keeps what it receives (in `written`, by workdir)."""

  written: dict[str, dict] = {}

  def __init__(self, run: fedsim_jax.RunInfo) -> None:
    self.record = self.written.setdefault(run.workdir, {'calls': []})
    self.record.update(config=run.config, resumed_rows=list(run.rows))

  def write_metrics(self, row):
    self.record['calls'].append(('row', dict(row)))

  def log_artifact(self, path):
    self.record['calls'].append(('artifact', path))

  def write_summary(self, summary):
    self.record['calls'].append(('summary', json.loads(json.dumps(summary))))

  def close(self):
    self.record['calls'].append(('close', None))


def test_a_writer_of_ones_own_receives_every_row_the_artifacts_and_the_summary(
  digits_data_dir, tmp_path
):
  workdir = tmp_path / 'run'
  config = make_tiny_config('fedbuff', digits_data_dir, **{'run.tensorboard': False})
  summary = fedsim_jax.run_experiment(config, workdir, writers=[RecordingWriter])
  record = RecordingWriter.written[str(workdir)]
  assert record['config'] == json.loads((workdir / 'config.json').read_text())
  assert record['resumed_rows'] == []
  calls = record['calls']
  rows = [value for kind, value in calls if kind == 'row']
  assert rows == read_metrics(workdir / 'metrics.jsonl') and len(rows) == 3
  artifacts = [value for kind, value in calls if kind == 'artifact']
  assert artifacts == [str(workdir / 'clients.json'), str(workdir / 'models')]
  assert calls[-2:] == [
    ('summary', json.loads((workdir / 'summary.json').read_text())),
    ('close', None),
  ]
  assert calls[-2][1]['final_accuracy'] == summary['final_accuracy']
  assert not (workdir / 'tensorboard').exists() and not (workdir / STATE_FILE).exists()


@pytest.mark.parametrize(
  'setting, value, expected',
  [
    ('run.mlflow', '', "run.mlflow='' is invalid; allowed values: an MLflow tracking URI"),
    ('run.mlflow', '  ', "run.mlflow='  ' is invalid; allowed values: an MLflow tracking URI"),
    ('run.mlflow_experiment', '', "run.mlflow_experiment='' is invalid; allowed values: a non"),
    ('run.mlflow', 'file:mlruns', "run.mlflow='file:mlruns' needs the MLflow client"),
  ],
  ids=['empty', 'blank', 'empty-experiment', 'not-installed'],
)
def test_invalid_mlflow_settings_are_one_line_before_anything_is_written(
  tmp_path, monkeypatch, setting, value, expected
):
  if 'needs' in expected:
    monkeypatch.setattr('fedsim_jax.run_settings.mlflow_available', lambda: False)
  config = make_tiny_config('fedavg', tmp_path / 'data', **{setting: value})
  with pytest.raises(ConfigError) as error:
    run_experiment(config, tmp_path / 'run')
  assert str(error.value).startswith(expected) and '\n' not in str(error.value)
  assert 'allowed' in str(error.value)
  assert not (tmp_path / 'run').exists()


def test_the_binary_refuses_an_empty_mlflow_uri_with_one_line_and_exit_2(tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  workdir = tmp_path / 'run'
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(root, 'experiments', 'run.py'),
      f'--config={os.path.join(root, "configs", "fedavg_fashion_mnist.py")}',
      '--config.run.mlflow=',
      f'--workdir={workdir}',
    ],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=root,
  )
  assert result.returncode == 2, result.stderr
  (line,) = result.stderr.strip().splitlines()
  assert "run.mlflow='' is invalid" in line and 'allowed values' in line
  assert not workdir.exists()


def test_a_tracking_store_that_cannot_be_written_stops_the_run_before_it_writes(
  tmp_path, digits_data_dir
):
  (tmp_path / 'a_file').write_text('')
  config = _config(digits_data_dir, str(tmp_path / 'a_file' / 'mlruns'))
  with pytest.raises(ConfigError) as error:
    run_experiment(config, tmp_path / 'run')
  message = str(error.value)
  assert message.startswith(f'run.mlflow={tmp_path / "a_file" / "mlruns"}: the tracking store')
  assert 'allowed' in message and '\n' not in message
  assert not (tmp_path / 'run').exists()
