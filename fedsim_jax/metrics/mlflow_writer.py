"""A run's metrics, summary and artifacts in an MLflow tracking store (a `RunWriter`;
`run.mlflow`, `run.mlflow_experiment`).

Written with `mlflow.tracking.MlflowClient` (the `mlflow` extra: `pip install
'fedsim_jax[mlflow]'`, which installs `mlflow-skinny`), imported only when a run asks for it.
A fedsim run is one MLflow run, in the experiment `run.mlflow_experiment` (created if needed),
named after the workdir:

- params: the resolved config, dotted (`run.num_rounds`), values as text (cut to MLflow's
  length limit);
- metrics: every numeric field of each metrics row, stepped by the server version
  (`virtual_time` included), and at the end the summary's numeric fields as `summary.<name>`
  (nested ones dotted: `summary.host.seconds`), stepped by the final version;
- tags: `fedsim.workdir`, and at the end `fedsim.status` (the summary's status) and
  `fedsim.code` (the code's commit, `summary['host']['code']`); the MLflow run ends FINISHED,
  KILLED (interrupted) or FAILED;
- artifacts: `clients.json` and `models/` of a finished run.

Resume: `<workdir>/mlflow_run.json` (written atomically) holds the MLflow run's id, its tracking
URI and the last version logged, updated after each row. A resumed run logs into the same
MLflow run from the version after that one: the rows it recomputes after its checkpoint are
the ones already logged (a resumed run is the run that was never stopped), so every version is
logged once. Params keep their first values (MLflow's params cannot change): a setting a
resume changed (a longer `run.num_rounds`) is in `config.json`. A resume into another tracking
URI, or `--overwrite`, starts a new MLflow run (a changed `run.mlflow_experiment` does not: the
MLflow run stays in its experiment).

A `file:` URI or a plain path is a local file store (a relative one is resolved against the
current directory). MLflow 3 refuses file stores unless the environment variable
`MLFLOW_ALLOW_FILE_STORE` is true; the writer sets it to true for such a URI when it is unset.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedsim_jax.metrics.run_writer import RunInfo, RunWriter, flatten, numeric_fields
from fedsim_jax.metrics.writers import write_json
from fedsim_jax.settings import ConfigError

STATE_FILE = 'mlflow_run.json'  # the MLflow run of a workdir, kept for a resumed run
DEFAULT_EXPERIMENT = 'fedsim'
# MLflow's limits (mlflow.utils.validation): the length of a param's value and of a key, and
# the params and metrics of one logging request.
MAX_PARAM_VALUE_LENGTH = 6000
MAX_KEY_LENGTH = 250
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
# The MLflow run's status for each end of a fedsim run (others: FAILED).
_MLFLOW_STATUS = {'completed': 'FINISHED', 'budget_exhausted': 'FINISHED', 'interrupted': 'KILLED'}


def mlflow_available() -> bool:
  """Whether the MLflow client (the `mlflow` extra) is installed."""
  return importlib.util.find_spec('mlflow') is not None


def is_file_store(uri: str) -> bool:
  """Whether `uri` names a local file store: a `file:` URI or a plain path."""
  return urllib.parse.urlparse(uri).scheme in ('', 'file')


def resolve_tracking_uri(uri: str) -> str:
  """`uri` with a file store's path made absolute (`file:///...`); other URIs unchanged."""
  if not is_file_store(uri):
    return uri
  parsed = urllib.parse.urlparse(uri)
  path = urllib.parse.unquote(parsed.path) if parsed.scheme else uri
  return pathlib.Path(path).expanduser().resolve().as_uri()


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
  return (items[i : i + size] for i in range(0, len(items), size))


class MlflowWriter(RunWriter):
  """Logs a run into an MLflow tracking store (see the module's docstring).

  Args:
    run: the run (its workdir, resolved config and the rows a resumed run has).
    tracking_uri: where to log: an `http(s)://` server, a `file:` URI or a path, or any URI
      MLflow knows (`databricks`, `sqlite:///...`).
    experiment: the MLflow experiment's name (created if it does not exist).
  """

  def __init__(self, run: RunInfo, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT):
    if is_file_store(tracking_uri):
      # MLflow 3 raises for a file store unless this is set; the file store is what a run
      # without a tracking server uses, so opt in (a value the user set is kept).
      os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')
    from mlflow.tracking import MlflowClient

    self.tracking_uri = resolve_tracking_uri(tracking_uri)
    self._state_path = os.path.join(run.workdir, STATE_FILE)
    try:
      self.client = MlflowClient(tracking_uri=self.tracking_uri)
      state = self._earlier_state()
      if state is not None:
        self.run_id: str = state['run_id']
        self.logged_through: int = state['logged_through']
        self.client.update_run(self.run_id, status='RUNNING')
      else:
        self.run_id = self._create_run(run, experiment)
        self.logged_through = -1
      self._log_params(run.flat_config)
    except Exception as error:  # noqa: BLE001 - whatever the store raises: one line, exit 2
      detail = str(error).strip().splitlines()[0][:200] if str(error).strip() else ''
      raise ConfigError(
        f'run.mlflow={tracking_uri}: the tracking store cannot be written '
        f'({type(error).__name__}: {detail}); allowed: a writable path or file: URI, or a '
        'reachable tracking server'
      ) from None
    if state is None:
      self._save_state()
    for row in run.rows:
      self.write_metrics(row)

  def _earlier_state(self) -> dict[str, Any] | None:
    """The state a resumed run left in its workdir, if it logged into this tracking URI and
    its MLflow run still exists."""
    try:
      with open(self._state_path, encoding='utf-8') as f:
        state = json.load(f)
    except (OSError, ValueError):
      return None
    if (
      not isinstance(state, dict)
      or state.get('tracking_uri') != self.tracking_uri
      or not isinstance(state.get('logged_through'), int)
    ):
      return None
    from mlflow.exceptions import MlflowException

    try:
      if self.client.get_run(state['run_id']).info.lifecycle_stage != 'active':
        return None
    except (MlflowException, KeyError, TypeError):
      return None
    return state

  def _create_run(self, run: RunInfo, experiment: str) -> str:
    from mlflow.exceptions import MlflowException

    found = self.client.get_experiment_by_name(experiment)
    if found is not None:
      experiment_id = found.experiment_id
    else:
      try:
        experiment_id = self.client.create_experiment(experiment)
      except MlflowException:  # created in the meantime by a run beside this one?
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
          raise
        experiment_id = found.experiment_id
    created = self.client.create_run(
      experiment_id,
      run_name=os.path.basename(run.workdir.rstrip(os.sep)),
      tags={'fedsim.workdir': run.workdir},
    )
    return created.info.run_id

  def _save_state(self) -> None:
    write_json(
      self._state_path,
      {
        'tracking_uri': self.tracking_uri,
        'run_id': self.run_id,
        'logged_through': self.logged_through,
      },
    )

  def _log_params(self, config: Mapping[str, Any]) -> None:
    """Logs the params the MLflow run does not have yet (all of them, for a new one)."""
    from mlflow.entities import Param

    logged = self.client.get_run(self.run_id).data.params
    params = [
      Param(key, str(value)[:MAX_PARAM_VALUE_LENGTH])
      for key, value in sorted(config.items())
      if key not in logged and len(key) <= MAX_KEY_LENGTH
    ]
    for chunk in _chunks(params, MAX_PARAMS_PER_BATCH):
      self.client.log_batch(self.run_id, params=list(chunk))

  def _log_metrics(self, values: Mapping[str, float], step: int) -> None:
    from mlflow.entities import Metric

    timestamp = int(time.time() * 1000)
    metrics = [
      Metric(name, value, timestamp, step)
      for name, value in values.items()
      if len(name) <= MAX_KEY_LENGTH
    ]
    for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
      self.client.log_batch(self.run_id, metrics=list(chunk))

  def write_metrics(self, row: Mapping[str, Any]) -> None:
    """Logs `row` stepped by its version, unless that version is logged already."""
    version = int(row['version'])
    if version <= self.logged_through:
      return
    values = numeric_fields(row)
    values.pop('version', None)
    self._log_metrics(values, version)
    self.logged_through = version
    self._save_state()

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    """Logs the summary's numbers (`summary.<name>`), its status and code as tags, and ends
    the MLflow run with the matching status."""
    numbers = numeric_fields(flatten(summary))
    final_version = summary.get('final_version')
    step = final_version if isinstance(final_version, int) else max(self.logged_through, 0)
    self._log_metrics({f'summary.{name}': value for name, value in numbers.items()}, step)
    status = str(summary.get('status'))
    self.client.set_tag(self.run_id, 'fedsim.status', status)
    code = (summary.get('host') or {}).get('code') or {}
    commit = code.get('commit') or code.get('version')
    if commit:
      self.client.set_tag(self.run_id, 'fedsim.code', str(commit))
    self.client.set_terminated(self.run_id, _MLFLOW_STATUS.get(status, 'FAILED'))

  def log_artifact(self, path: str) -> None:
    if os.path.isdir(path):
      self.client.log_artifacts(self.run_id, path, artifact_path=os.path.basename(path))
    elif os.path.isfile(path):
      self.client.log_artifact(self.run_id, path)
