"""A built run's life in its workdir (`fedsim_jax.experiment` builds runs and starts them here).

- `workspace`: the workdir, checked and locked before the run's start-up.
- `parts`: what a lifecycle receives, the built run and the settings it goes by.
- `run_lifecycle`: `RunLifecycle`, a run from its first output to its summary: checkpoints,
  evaluations, divergence, signals, final outputs.
- `resume`: which config changes a resumed run may make, the checkpoint and task trace it
  continues.
- `summary`: progress, the summary's fields, the message of an output that cannot be written.
- `lockstep`: several runs run together (a sweep over seeds).
"""

from fedsim_jax.lifecycle.parts import Evaluator, OnDivergence, RunOptions, RunParts
from fedsim_jax.lifecycle.resume import RESUMABLE_CHANGES, config_differences, default_settings
from fedsim_jax.lifecycle.run_lifecycle import STATUSES, Diverged, RunLifecycle
from fedsim_jax.lifecycle.summary import progress
from fedsim_jax.lifecycle.workspace import Workspace
from fedsim_jax.workdir import RunStatus

__all__ = [
  'RESUMABLE_CHANGES',
  'STATUSES',
  'Diverged',
  'Evaluator',
  'OnDivergence',
  'RunLifecycle',
  'RunOptions',
  'RunParts',
  'RunStatus',
  'Workspace',
  'config_differences',
  'default_settings',
  'progress',
]
