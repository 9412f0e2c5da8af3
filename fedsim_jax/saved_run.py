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
import os
from collections.abc import Mapping
from typing import Any

from fedsim_jax.checkpointing import quiet_orbax, this_process_only
from fedsim_jax.metrics import read_metrics, write_json
from fedsim_jax.models import Model, Params, get_model

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
  and the architecture's `description` (see `model_description`) to `models/model.json`."""
  directory = os.path.abspath(os.path.join(workdir, MODELS_DIR))
  os.makedirs(directory, exist_ok=True)
  with quiet_orbax():
    checkpointer = _checkpointer()
    for name, params in models.items():
      checkpointer.save(os.path.join(directory, name), params, force=True)
    checkpointer.wait_until_finished()
  write_json(os.path.join(directory, 'model.json'), dict(description))


@dataclasses.dataclass(frozen=True)
class SavedRun:
  """A run read back from its workdir.

  Attributes:
    config: `config.json` (every setting, the algorithm's resolved settings included).
    metrics: the rows of `metrics.jsonl`.
    summary: `summary.json` (None while the run has not ended).
    model: the architecture, rebuilt (None if the run saved no model yet).
    params: the saved models by name (`final`, `best`, and `evaluated` where it exists), each
      ready for `model.apply(params, x)`.
  """

  config: dict[str, Any]
  metrics: list[dict[str, Any]]
  summary: dict[str, Any] | None
  model: Model | None
  params: dict[str, Params]


def load_run(workdir: str | os.PathLike) -> SavedRun:
  """Reads a run's outputs: config, metrics, summary, architecture and saved models.

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
  return SavedRun(config=config, metrics=metrics, summary=summary, model=model, params=params)
