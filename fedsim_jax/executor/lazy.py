"""`LazyExecutor`: an `Executor` whose tasks run on per-batch blocks of a `LazyFederation`.

It plugs a `data.lazy.LazyFederation` into an `Executor` without changing it: before each `run`
it gathers the tasks' clients, swaps the executor's `data` for the block (jitted programs take
`data` as an argument, never closed over) and renumbers the tasks' clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedsim_jax.data.lazy import LazyFederation


class LazyExecutor:
  """Runs an executor's batches on per-batch blocks of a `LazyFederation`.

  `executor` is an `executor.Executor` built with any block of `federation` (e.g.
  `federation.gather([0]).data`); its `data` is replaced before every `run`. Results are
  those the same executor would give on the eager `FederatedDataset`: row i is `tasks[i]`.
  Every other attribute (`tasks_run`, `steps_run`, `num_compiled_programs`, ...) is the
  executor's; `num_compiled_programs` does not count the extra compilations that new block
  shapes cause (`block_shapes` lists those shapes).
  """

  def __init__(self, executor: Any, federation: LazyFederation):
    self.executor = executor
    self.federation = federation
    self.block_shapes: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

  def run(self, tasks: Sequence[Any]) -> Any:
    if not tasks:
      raise ValueError('LazyExecutor.run needs at least one task')
    data, local_tasks = self.federation.gather_tasks(tasks)
    self.block_shapes.add((tuple(data.x.shape), tuple(data.indices.shape)))
    self.executor.data = self.executor.replicate(data)  # onto the executor's devices
    return self.executor.run(local_tasks)

  def __getattr__(self, name: str) -> Any:
    return getattr(self.executor, name)
