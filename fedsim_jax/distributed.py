"""Runs over several processes (hosts) with `jax.distributed`.

Every process runs the same experiment: the same config and seeds, hence the same host-side
event queue and the same decisions, so no host state is ever exchanged. What the processes
share is the executor's device mesh: with `executor.devices` equal to `jax.device_count()`, the
task axis of each training batch is sharded over the devices of every process (the collectives
go through gloo on CPU, NCCL on GPU). Only process 0 writes the workdir (outputs and
checkpoints); every process reads a checkpoint to resume.

`initialize` must run before anything touches a device. It takes the coordinator's address, the
number of processes and this process's id from the config (`run.coordinator_address`,
`run.num_processes`, `run.process_id`), else from the environment variables
`FEDSIM_COORDINATOR_ADDRESS`, `FEDSIM_NUM_PROCESSES` and `FEDSIM_PROCESS_ID`, else lets JAX
detect a cluster launcher (Slurm, Open MPI, Kubernetes, Cloud TPU).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

ENVIRONMENT = {
  'coordinator_address': 'FEDSIM_COORDINATOR_ADDRESS',
  'num_processes': 'FEDSIM_NUM_PROCESSES',
  'process_id': 'FEDSIM_PROCESS_ID',
}


def settings_from(
  coordinator_address: str | None, num_processes: int | None, process_id: int | None
) -> dict[str, Any]:
  """The `jax.distributed.initialize` arguments: the given ones, else the environment's."""
  given = {
    'coordinator_address': coordinator_address,
    'num_processes': num_processes,
    'process_id': process_id,
  }
  settings: dict[str, Any] = {}
  for name, value in given.items():
    if value is None and os.environ.get(ENVIRONMENT[name]):
      text = os.environ[ENVIRONMENT[name]]
      value = text if name == 'coordinator_address' else int(text)
    settings[name] = value
  return settings


def initialize(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> None:
  """Joins this process to the run's processes (once; later calls do nothing). On CPU the
  cross-process collectives use gloo."""
  if jax.distributed.is_initialized():
    return
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(**settings_from(coordinator_address, num_processes, process_id))


def is_primary() -> bool:
  """Whether this process writes the run's outputs (process 0; always, in a one-process run)."""
  return jax.process_index() == 0


def host_value(array: jax.Array) -> np.ndarray:
  """`array` as a numpy array on this host, gathered from the other processes where it is
  sharded over them."""
  if array.is_fully_addressable:
    return np.asarray(array)
  from jax.experimental import multihost_utils

  return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def to_host(tree: Any) -> Any:
  """`tree` with every JAX array replaced by its `host_value`."""
  return jax.tree_util.tree_map(
    lambda leaf: host_value(leaf) if isinstance(leaf, jax.Array) else leaf, tree
  )
