"""Per-client state that an algorithm keeps beside a scheduler that knows nothing about it.

Some client objectives need inputs that differ per client and persist across its tasks (ASO-Fed's
decayed gradient and step size). The asynchronous schedulers (`AsynchronousScheduler`, the
periodic trigger) take such a `ClientState`: every task they dispatch gets
`task_inputs(sim, client)` as its `task_inputs`, and `observe_arrival(sim, handle)` sees every
arrival first (while its result is still readable), so the algorithm updates the client's state
from the task's result. The scheduler's policy (who trains, when to aggregate, what to discard)
is unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol

from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle


class ClientState(Protocol):
  """Per-client task inputs and an arrival observer."""

  def task_inputs(self, sim: SchedulerContext, client: int) -> Any:
    """The `task_inputs` of a task dispatched to `client`."""

  def observe_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    """Called with each arrived task before the scheduler handles it."""
