"""Executor layer: runs batches of client tasks (vmap / loop backends, bucketing)."""

from fedsim_jax.data.bucketing import round_up_to_bucket
from fedsim_jax.executor.choice import Backend, StepLoop
from fedsim_jax.executor.executor import (
  BACKENDS,
  STEP_LOOPS,
  ClientTask,
  Executor,
  NoTrainingExecutor,
  TaskBatchResult,
)

__all__ = [
  'round_up_to_bucket',
  'BACKENDS',
  'STEP_LOOPS',
  'Backend',
  'StepLoop',
  'ClientTask',
  'Executor',
  'NoTrainingExecutor',
  'TaskBatchResult',
]
