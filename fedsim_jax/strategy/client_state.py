"""Per-client state for algorithms built on a scheduler that knows nothing about it.

Some client objectives need inputs that differ per client and persist across its tasks (ASO-Fed's
decayed gradient and step size). `WithClientState` wraps any scheduler (the shared asynchronous
scheduler, FedASMU's periodic trigger, ...): every task the wrapped scheduler dispatches gets
`task_inputs(sim, client)` as its `task_inputs`, and `observe_arrival(sim, handle)` sees every
arrival before the wrapped scheduler does (while its result is still readable), so the algorithm
can update the client's state from the task's result. The wrapped scheduler's policy (who
trains, when to aggregate, what to discard) is unchanged. It is reached through `start`,
`on_arrival`, `on_timer` and `on_dropout`; any other attribute (e.g. `report`) is the wrapped
scheduler's own, called with the plain simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedsim_jax.runtime.simulation import Simulation, TaskHandle

TaskInputsFn = Callable[[Simulation, int], Any]
ArrivalObserver = Callable[[Simulation, TaskHandle], None]


class _DispatchWithInputs:
  """The simulation as the wrapped scheduler sees it: `dispatch` adds the task inputs; every
  other attribute is the simulation's own."""

  def __init__(self, sim: Simulation, task_inputs: TaskInputsFn):
    self._sim = sim
    self._task_inputs = task_inputs

  def __getattr__(self, name: str) -> Any:
    return getattr(self._sim, name)

  def dispatch(self, client_id: int, num_steps: int, **kwargs) -> TaskHandle:
    if kwargs.get('task_inputs') is not None:
      raise ValueError(
        'the wrapped scheduler sets task_inputs itself; WithClientState cannot add its own'
      )
    kwargs['task_inputs'] = self._task_inputs(self._sim, int(client_id))
    return self._sim.dispatch(client_id, num_steps, **kwargs)


class WithClientState:
  """`scheduler` with per-client task inputs and an arrival observer (see the module docstring).

  Args:
    scheduler: any `runtime.Scheduler`.
    task_inputs: `(sim, client) -> task_inputs` of each dispatched task.
    observe_arrival: called with each arrived task before `scheduler.on_arrival`.
  """

  def __init__(
    self, scheduler: Any, task_inputs: TaskInputsFn, observe_arrival: ArrivalObserver | None = None
  ):
    self.scheduler = scheduler
    self.task_inputs = task_inputs
    self.observe_arrival = observe_arrival
    self._view: _DispatchWithInputs | None = None

  def __getattr__(self, name: str) -> Any:  # e.g. the wrapped scheduler's `report`
    if name == 'scheduler':
      raise AttributeError(name)
    return getattr(self.scheduler, name)

  def _wrapped(self, sim: Simulation) -> _DispatchWithInputs:
    if self._view is None or self._view._sim is not sim:
      self._view = _DispatchWithInputs(sim, self.task_inputs)
    return self._view

  def start(self, sim: Simulation) -> None:
    self.scheduler.start(self._wrapped(sim))

  def on_arrival(self, sim: Simulation, handle: TaskHandle) -> None:
    if self.observe_arrival is not None:
      self.observe_arrival(sim, handle)
    self.scheduler.on_arrival(self._wrapped(sim), handle)

  def on_timer(self, sim: Simulation, payload: Any) -> None:
    self.scheduler.on_timer(self._wrapped(sim), payload)

  def on_dropout(self, sim: Simulation, handle: TaskHandle) -> None:
    on_dropout = getattr(self.scheduler, 'on_dropout', None)
    if on_dropout is not None:
      on_dropout(self._wrapped(sim), handle)
