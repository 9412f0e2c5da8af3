"""Client layer: pure local-update functions `(params, data, task, key) -> (delta, aux)`."""

from fedsim_jax.client.local_update import (
  CLIENT_OPTIMIZERS,
  TEACHER_SOURCES,
  ClientState,
  ClientUpdate,
  TeacherInputs,
  client_optimizer,
  distillation_loss,
  sgd_client_update,
)
from fedsim_jax.client.runner import local_step, run_local_training

__all__ = [
  'CLIENT_OPTIMIZERS',
  'TEACHER_SOURCES',
  'ClientState',
  'ClientUpdate',
  'TeacherInputs',
  'client_optimizer',
  'distillation_loss',
  'sgd_client_update',
  'local_step',
  'run_local_training',
]
