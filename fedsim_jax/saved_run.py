"""A finished run's trained models on disk, and `load_run`, which reads a whole run back.

A run saves its models with orbax under `<workdir>/models/`: `final` (the server model at the
end), `best` (the evaluated model at its best test accuracy) and, when the algorithm evaluates
another model than the one it trains (an EMA, FeAST-on-MSG's auxiliary model), `evaluated`
(that model at the end). `models/model.json` names the architecture, so that `load_run` can
rebuild it without the dataset.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from fedsim_jax import workdir as workdir_lib
from fedsim_jax.checkpointing import (
  WriteError,
  failure_cause,
  quiet_orbax,
  remove_unfinished,
  this_process_only,
)
from fedsim_jax.metrics import read_metrics, write_json
from fedsim_jax.models import MODELS, Model, Params, get_model

MODELS_DIR = 'models'


def _checkpointer() -> Any:
  import orbax.checkpoint as ocp  # slow to import: only when models are written or read

  return ocp.StandardCheckpointer(multiprocessing_options=this_process_only())


def model_description(model: Model, kwargs: Mapping[str, Any]) -> dict[str, Any]:
  """What `get_model` needs to rebuild `model` (`kwargs`: the architecture's own)."""
  return {
    'name': model.name,
    'input_shape': list(model.input_shape),
    'num_classes': model.num_classes,
    'kwargs': dict(kwargs),
  }


def save_models(
  workdir: str | os.PathLike, description: Mapping[str, Any], models: Mapping[str, Params]
) -> None:
  """Writes each named parameter pytree to `<workdir>/models/<name>` (replacing an older one)
  and the architecture's `description` (see `model_description`) to `models/model.json`.

  Raises:
    WriteError: a model could not be written (what was written of it is removed).
  """
  directory = os.path.abspath(os.path.join(workdir, MODELS_DIR))
  path = directory
  try:
    os.makedirs(directory, exist_ok=True)
    remove_unfinished(directory)  # left by a process killed while saving
    with quiet_orbax():
      checkpointer = _checkpointer()
      for name, params in models.items():
        path = os.path.join(directory, name)
        checkpointer.save(path, params, force=True)
        checkpointer.wait_until_finished()
    path = os.path.join(directory, 'model.json')
    write_json(path, dict(description))
  except BaseException as error:
    remove_unfinished(directory)
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
      raise
    raise WriteError('the model', path, failure_cause(error)) from error


@dataclasses.dataclass(frozen=True)
class SavedRun:
  """A run read back from its workdir.

  Attributes:
    config: `config.json` (every setting, the algorithm's resolved settings included).
    metrics: the rows of `metrics.jsonl`.
    summary: `summary.json` (`{'status': 'running'}` while the run runs; None if it has none).
    model: the architecture, rebuilt (None if the run saved no model yet).
    params: the saved models by name (`final`, `best`, and `evaluated` where it exists), each
      ready for `model.apply(params, x)`.
    status: where the run stands (`fedsim_jax.workdir.run_status`): 'completed' (only then
      are `summary` and `params` its results), 'interrupted', 'diverged', 'failed', 'running'
      or 'killed' (stopped without a summary, or killed while `--resume` extended it: `summary`
      and `params` may then be an earlier end's).
  """

  config: dict[str, Any]
  metrics: list[dict[str, Any]]
  summary: dict[str, Any] | None
  model: Model | None
  params: dict[str, Params]
  status: str = 'completed'


def load_run(workdir: str | os.PathLike) -> SavedRun:
  """Reads a run's outputs: config, metrics, summary, architecture and saved models, and where
  the run stands (`SavedRun.status`; a run that is not 'completed' is also named in a warning).

  Example:
    run = fedsim_jax.load_run('runs/demo')
    logits = run.model.apply(run.params['final'], images)
  """
  workdir = os.fspath(workdir)
  with open(os.path.join(workdir, 'config.json'), encoding='utf-8') as f:
    config = json.load(f)
  metrics_path = os.path.join(workdir, 'metrics.jsonl')
  metrics = read_metrics(metrics_path) if os.path.exists(metrics_path) else []
  summary_path = os.path.join(workdir, 'summary.json')
  summary = None
  if os.path.exists(summary_path):
    with open(summary_path, encoding='utf-8') as f:
      summary = json.load(f)
  directory = os.path.abspath(os.path.join(workdir, MODELS_DIR))
  description_path = os.path.join(directory, 'model.json')
  model, params = None, {}
  if os.path.exists(description_path):
    with open(description_path, encoding='utf-8') as f:
      description = json.load(f)
    MODELS.import_module((config.get('model') or {}).get('module'))  # a user's model
    model = get_model(
      description['name'],
      tuple(description['input_shape']),
      description['num_classes'],
      **description['kwargs'],
    )
    with quiet_orbax():
      checkpointer = _checkpointer()
      for name in sorted(os.listdir(directory)):
        if os.path.isdir(os.path.join(directory, name)):
          params[name] = checkpointer.restore(os.path.join(directory, name))
  status = workdir_lib.run_status(workdir, summary, metrics[-1].get('version') if metrics else None)
  if status not in workdir_lib.FINISHED_STATUSES:
    logging.warning('%s: the run is %s, not completed (SavedRun.status)', workdir, status)
  return SavedRun(
    config=config, metrics=metrics, summary=summary, model=model, params=params, status=status
  )
