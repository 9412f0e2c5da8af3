"""Refuse a run that cannot fit in memory before it starts, naming the setting responsible.

The estimate counts the model-sized arrays a run holds at its peak: the server state, the start
models of the tasks in flight (one for a synchronous round, whose cohort downloads one model),
their computed updates, the training workspace of the tasks that train at once (parameters,
gradients and optimizer state), and the per-client tables or histories its algorithm keeps
(`Base.tasks_in_flight`, `Base.client_tables`), plus a device copy of the training data.
Updates are computed at most `executor.max_batch_tasks` at a time; a synchronous round holds
all of its updates only when its aggregator cannot sum them in chunks (no linear form). It is a
lower bound on what the run needs (activations and compiled programs come on top), so a refused
run would certainly not have fit.
"""

from __future__ import annotations

import dataclasses

from fedsim_jax.settings import ConfigError

_GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Need:
  """One part of the estimate: `nbytes`, caused by `setting`, described by `what`."""

  setting: str
  nbytes: float
  what: str


def _cgroup_available() -> float | None:
  """What the process's cgroup (v2) still allows, if it sets a limit."""
  try:
    with open('/sys/fs/cgroup/memory.max', encoding='utf-8') as f:
      limit = f.read().strip()
    if limit == 'max':
      return None
    with open('/sys/fs/cgroup/memory.current', encoding='utf-8') as f:
      current = int(f.read().strip())
    return float(int(limit) - current)
  except (OSError, ValueError):
    return None


def available_bytes() -> float | None:
  """Memory this process can still get: MemAvailable, or less under a cgroup limit (None where
  neither can be read)."""
  available = None
  try:
    with open('/proc/meminfo', encoding='utf-8') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          available = float(line.split()[1]) * 1024
  except OSError:
    pass
  cgroup = _cgroup_available()
  if cgroup is not None:
    available = cgroup if available is None else min(available, cgroup)
  return available


def estimate(
  settings: object,
  *,
  num_clients: int,
  model_bytes: int,
  data_bytes: int,
  training_at_once: int | None,
  max_batch_tasks: int | None = None,
  sums_in_chunks: bool = False,
) -> list[Need]:
  """The parts of a run's peak memory (see the module docstring).

  Args:
    settings: the algorithm's settings (its `tasks_in_flight` and `client_tables` hooks).
    num_clients: the federation's size.
    model_bytes: one model's parameters.
    data_bytes: the training data held on the device.
    training_at_once: tasks that train at the same time (None: all tasks in flight, as the
      vmap backend trains a whole batch at once).
    max_batch_tasks: the most tasks computed at once (None: no limit).
    sums_in_chunks: the aggregator sums a large round in chunks (`Aggregator.linear`).
  """
  needs = [Need('model.name', 4 * model_bytes, 'server model and optimizer state')]
  tasks_hook = getattr(settings, 'tasks_in_flight', None)
  tasks = tasks_hook(num_clients) if tasks_hook is not None else None
  if tasks is not None:
    setting = f'{tasks.setting}={tasks.copies:g}'
    batch = tasks.copies if max_batch_tasks is None else min(tasks.copies, max_batch_tasks)
    if tasks.shared_start:  # one start model; a round's updates unless summed in chunks
      needs.append(Need(setting, model_bytes, f'{tasks.what}: their start model'))
      held = batch if sums_in_chunks else tasks.copies
    else:  # each task its own start model; updates computed a batch at a time
      needs.append(Need(setting, tasks.copies * model_bytes, f'{tasks.what}: start models'))
      held = batch
    needs.append(Need(setting, held * model_bytes, f'{tasks.what}: computed updates'))
    training = batch if training_at_once is None else min(training_at_once, batch)
    workspace = 'training workspace (parameters, gradients, optimizer state)'
    needs.append(Need(setting, 3 * training * model_bytes, workspace))
  tables_hook = getattr(settings, 'client_tables', None)
  for table in tables_hook(num_clients) if tables_hook is not None else []:
    needs.append(Need(f'{table.setting}={table.copies:g}', table.copies * model_bytes, table.what))
  needs.append(Need('data.name', data_bytes, 'training data on the device'))
  return needs


def check_fits(needs: list[Need], available: float | None) -> None:
  """ConfigError (one line) if the estimate exceeds `available`, naming the largest part."""
  total = sum(need.nbytes for need in needs)
  if available is None or total <= available:
    return
  largest = max(needs, key=lambda need: need.nbytes)
  raise ConfigError(
    f'this run needs at least {total / _GIB:.1f} GiB of memory, more than the '
    f'{available / _GIB:.1f} GiB available: {largest.setting} ({largest.what}) alone takes '
    f'{largest.nbytes / _GIB:.1f} GiB; allowed: a smaller {largest.setting.split("=")[0]}, or '
    'run.check_memory=False to start anyway'
  )


def describe_needs(needs: list[Need]) -> str:
  return ', '.join(f'{need.what} {need.nbytes / 2**20:.0f} MiB' for need in needs)
