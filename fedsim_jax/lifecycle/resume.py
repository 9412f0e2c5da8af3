"""Resuming a run from its workdir: which config changes a resumed run may make, the checkpoint
it continues from, and the task trace it goes on writing (`docs/checkpoints.md`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from absl import logging

from fedsim_jax import config as config_lib
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.checkpointing import CheckpointError, Checkpoints, Restored
from fedsim_jax.metrics.writers import TaskTraceWriter
from fedsim_jax.registry import Selection
from fedsim_jax.settings import Settings

# Settings a resumed run may change: how long it runs, how it checkpoints, and what only its
# host side or summary reads. Anything else would make it a different run.
RESUMABLE_CHANGES = (
  'run.num_rounds',
  'run.max_virtual_time',
  'run.max_client_updates',
  'run.checkpoint_every',
  'run.checkpoint_every_minutes',
  'run.keep_checkpoints',
  'run.compilation_cache',
  'run.target_accuracy',
  'run.check_memory',
  'run.tensorboard',
  'run.mlflow',  # another tracking URI starts a new MLflow run (metrics/mlflow_writer.py)
  'run.mlflow_experiment',
  'run.write_tasks',  # turned off, or on, a run goes on without its task trace
  'run.distributed',
  'run.coordinator_address',
  'run.num_processes',
  'run.process_id',
  'executor.threads',
  'executor.devices',  # each task's key derives from its seed: results do not depend on it
)


def _flatten(tree: Any, prefix: str = '') -> dict[str, Any]:
  if isinstance(tree, dict):
    flat: dict[str, Any] = {}
    for key, value in tree.items():
      flat.update(_flatten(value, f'{prefix}{key}.'))
    return flat
  return {prefix[:-1]: list(tree) if isinstance(tree, tuple) else tree}


def config_differences(
  saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[str]:
  """Dotted names of the settings in which two resolved configs differ, other than those a
  resumed run may change (`RESUMABLE_CHANGES`).

  A setting missing from `saved` (added to fedsim_jax after that run started) is no difference
  when `current` holds its value in `defaults`: settings are added with defaults that keep the
  earlier behaviour, so the checkpointed run used it."""
  old, new = _flatten(saved), _flatten(json.loads(json.dumps(current)))
  added_defaults = _flatten(json.loads(json.dumps(defaults or {})))
  missing = object()
  return sorted(
    name
    for name in set(old) | set(new)
    if old.get(name, missing) != new.get(name, missing)
    and name not in RESUMABLE_CHANGES
    and not (name not in old and name in added_defaults and new.get(name) == added_defaults[name])
  )


def default_settings(
  settings: Settings, selections: Mapping[str, Selection] | None = None
) -> dict[str, Any]:
  """The resolved config of `base_config()` with `settings`' algorithm defaults and the
  defaults of the plugins `selections` name (by section): the values a setting added after a
  run started is given by default (see `config_differences`)."""
  defaults = config_lib.base_config().to_dict()
  defaults['algorithm']['kwargs'] = type(settings)().as_dict()
  for section, selection in (selections or {}).items():
    defaults[section]['kwargs'] = type(selection.settings)().as_dict()
  return defaults


def checkpoint_to_resume(
  checkpoints: Checkpoints,
  workdir: str,
  resolved: dict[str, Any],
  settings: Settings,
  selections: Mapping[str, Selection] | None = None,
) -> Restored | None:
  """The newest checkpoint in `checkpoints`, None if there is none (the run starts from the
  beginning); `ConfigError` if it cannot be read or its run's config differs from `resolved`
  (the algorithm's `settings` and the plugins' `selections` give the defaults of settings
  added since) in more than
  `RESUMABLE_CHANGES`."""
  try:
    restored = checkpoints.load_latest()
  except CheckpointError as error:
    raise config_lib.ConfigError(f'--resume: {error}') from None
  if restored is None:
    if workdir_lib.holds_results(workdir):  # a run stopped before its first checkpoint
      logging.warning('--resume: no checkpoint in %s; starting from the beginning', workdir)
    return None
  differing = config_differences(
    config_lib.upgrade_layout(restored.meta['config']),
    resolved,
    default_settings(settings, selections),
  )
  if differing:
    raise config_lib.ConfigError(
      f'--resume: the config differs from the checkpointed run in {", ".join(differing)}; '
      f'allowed changes: {", ".join(RESUMABLE_CHANGES)}'
    )
  return restored


def task_trace_writer(
  workdir: str, *, primary: bool, write_tasks: bool, restored: Restored | None
) -> TaskTraceWriter | None:
  """The writer of `tasks.jsonl`: a new trace, or, resuming, the checkpointed trace cut back
  to its checkpointed length. A trace is whole or absent: a resumed run goes on without one,
  with a warning, where the checkpointed part is lost (the file is missing or shorter than
  the checkpoint records), the checkpointed run wrote none, or `run.write_tasks` is off now."""
  if not write_tasks:
    if restored is not None and primary:
      _drop_task_trace(workdir, 'run.write_tasks is off')
    return None
  # (a non-primary process's scratch trace starts empty: only process 0's is kept)
  if restored is None or not primary:
    return TaskTraceWriter(workdir)
  offset = restored.state['run'].get('tasks_offset')
  if offset is None:
    _drop_task_trace(workdir, 'the checkpointed run kept no task trace')
    return None
  path = os.path.join(workdir, 'tasks.jsonl')
  size = os.path.getsize(path) if os.path.isfile(path) else None
  if size is None or size < offset:
    lost = 'it is missing' if size is None else f'it has {size} of its checkpointed {offset} bytes'
    _drop_task_trace(workdir, f'{path} cannot be continued ({lost})')
    return None
  return TaskTraceWriter(workdir, offset=offset)


def _drop_task_trace(workdir: str, reason: str) -> None:
  path = os.path.join(workdir, 'tasks.jsonl')
  if os.path.lexists(path):
    os.remove(path)  # a trace of part of the run would read as the whole run's
  logging.warning('--resume: %s; the run goes on without its task trace (tasks.jsonl)', reason)
