"""Client layer: pure local-update functions `(params, data, task, key) -> (delta, aux)`: one
engine (`local_update`) on an objective of loss terms (`objective`)."""

from fedsim_jax.client.local_update import (
  CLIENT_OPTIMIZERS,
  ClientOptimizer,
  ClientState,
  ClientUpdate,
  Prelude,
  client_optimizer,
  local_update,
  sgd_client_update,
)
from fedsim_jax.client.objective import (
  TEACHER_SOURCES,
  CrossEntropy,
  Distillation,
  Objective,
  Proximal,
  Teacher,
  TeacherInputs,
  Term,
  TermInputs,
  cross_entropy,
  distillation,
  distillation_loss,
  proximal,
  regularised_objective,
  squared_distance,
)
from fedsim_jax.client.runner import local_step, run_local_training

__all__ = [
  'CLIENT_OPTIMIZERS',
  'TEACHER_SOURCES',
  'ClientOptimizer',
  'ClientState',
  'ClientUpdate',
  'CrossEntropy',
  'Distillation',
  'Objective',
  'Prelude',
  'Proximal',
  'Teacher',
  'TeacherInputs',
  'Term',
  'TermInputs',
  'client_optimizer',
  'cross_entropy',
  'distillation',
  'distillation_loss',
  'local_update',
  'proximal',
  'regularised_objective',
  'sgd_client_update',
  'squared_distance',
  'local_step',
  'run_local_training',
]
