"""What a scheduler sees of a simulation and what it may ask of it.

A scheduler's callbacks (`start`, `on_arrival`, `on_timer`, ...) receive a `SchedulerContext`,
not the `Simulation`: a read-only view (virtual time, server version, the federation, the idle
clients, the policy's random generator, arrived tasks' results) and the actions the simulation
executes for it (dispatch, aggregate, discard, fold in, set a timer, ...). The simulation's own
state (event queue, accounting, executor, server state) is out of reach, so a policy can only
change the run through those actions, and a scheduler can be tested against any object with
this interface.

Actions take effect as they are issued, not after the callback returns: a policy's later
decisions in the same event must see its earlier ones (a refill draws among the clients still
idle after the previous dispatch; the round after an aggregation is sent the new model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedsim_jax.models import Params
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.runtime.updates import UpdateBatch

if TYPE_CHECKING:  # the simulation builds its context; no import at run time
  from fedsim_jax.runtime.simulation import Simulation
  from fedsim_jax.runtime.tasks import TaskHandle


class SchedulerContext:
  """A simulation as its scheduler sees it.

  Read (the view):
    `now` (virtual seconds), `version` (server versions so far), `num_clients`,
    `client_sizes` (`[num_clients]` examples per client, for weights), `params` (the global
    model), `rng` (the policy's numpy Generator: draw every random choice from it),
    `client_updates` (tasks that reached the server), `aggregated_counts` and
    `dispatch_counts` (per client), `idle_clients()` (online and not
    training, ascending), `draw_idle_client(rng)`, `is_busy(client)`,
    `next_availability_time()`, `sample_latency(client)` (draws the client's next task
    latency, to size its work before dispatching), `download_time(client, latency)`; and the
    results of arrived tasks: `task_params(handle)`, `task_aux(handle)`,
    `updates(handles, weights, ...)` (an `UpdateBatch`).

  Act (executed by the simulation at once):
    `dispatch(client, num_steps, ...)` -> `TaskHandle`; `set_timer(time, payload)`;
    `apply_updates(handles, weights)` and `apply_update_batch(batch, handles)` (a new server
    version); `discard(handle, reason)`; `fold_in(handles)` and `update_server_state(fn)`
    (use updates without a new version); `advance_version()` (a round with nothing to apply);
    `record_skipped(client, **extras)` (trace a selected client that does not train).

  Each is the `Simulation` method of the same name (see it for the arguments), called on the
  simulation when the scheduler calls it.
  """

  def __init__(self, simulation: Simulation) -> None:
    self._simulation = simulation
    # Fixed for a run (a restored simulation holds equal sizes): one read-only view, since
    # refills read it at every dispatch.
    self._client_sizes = _read_only(simulation.client_sizes)

  # ---- Actions (each executed by the simulation as it is called) -----------------------------

  def dispatch(
    self,
    client_id: int,
    num_steps: int,
    *,
    latency: TaskLatency | None = None,
    start_params: Params | None = None,
    task_inputs: Any = None,
    metadata: dict[str, Any] | None = None,
    intermediate: bool = False,
    continues: TaskHandle | None = None,
    planned_steps: int | None = None,
  ) -> TaskHandle:
    return self._simulation.dispatch(
      client_id,
      num_steps,
      latency=latency,
      start_params=start_params,
      task_inputs=task_inputs,
      metadata=metadata,
      intermediate=intermediate,
      continues=continues,
      planned_steps=planned_steps,
    )

  def set_timer(self, time: float, payload: Any = None) -> None:
    self._simulation.set_timer(time, payload)

  def apply_updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int] | None = None,
  ) -> None:
    if staleness is None:
      self._simulation.apply_updates(handles, weights)
    else:
      self._simulation.apply_updates(handles, weights, staleness=staleness)

  def apply_update_batch(self, batch: UpdateBatch, handles: Sequence[TaskHandle] = ()) -> None:
    self._simulation.apply_update_batch(batch, handles)

  def discard(self, handle: TaskHandle, reason: str) -> None:
    self._simulation.discard(handle, reason)

  def fold_in(self, handles: Sequence[TaskHandle]) -> None:
    self._simulation.fold_in(handles)

  def update_server_state(self, update: Callable[[Any], Any]) -> None:
    self._simulation.update_server_state(update)

  def advance_version(self) -> None:
    self._simulation.advance_version()

  def record_skipped(self, client_id: int, **extras: Any) -> None:
    self._simulation.record_skipped(client_id, **extras)

  # ---- The view ----------------------------------------------------------------------------

  def idle_clients(self) -> np.ndarray:
    return self._simulation.idle_clients()

  def draw_idle_client(self, rng: np.random.Generator) -> int | None:
    return self._simulation.draw_idle_client(rng)

  def is_busy(self, client_id: int) -> bool:
    return self._simulation.is_busy(client_id)

  def next_availability_time(self) -> float:
    return self._simulation.next_availability_time()

  def sample_latency(self, client_id: int) -> TaskLatency:
    return self._simulation.sample_latency(client_id)

  def task_params(self, handle: TaskHandle) -> Params:
    return self._simulation.task_params(handle)

  def task_aux(self, handle: TaskHandle) -> dict[str, Any]:
    return self._simulation.task_aux(handle)

  @property
  def now(self) -> float:
    return self._simulation.now

  @property
  def version(self) -> int:
    return self._simulation.version

  @property
  def num_clients(self) -> int:
    return self._simulation.num_clients

  @property
  def client_sizes(self) -> np.ndarray:
    return self._client_sizes

  @property
  def params(self) -> Params:
    return self._simulation.params

  def client_loss(self, params: Params, client_id: int) -> float:
    """Client `client_id`'s mean loss on all its training examples at `params`
    (`strategy.client_loss.ClientLoss`; q-FFL's F_k)."""
    loss = self._simulation.client_loss
    if loss is None:
      raise ValueError('this simulation was built without client_loss (Simulation(client_loss=))')
    return loss(params, int(client_id))

  @property
  def rng(self) -> np.random.Generator:
    return self._simulation.rng

  @property
  def client_updates(self) -> int:
    return self._simulation.client_updates

  @property
  def aggregated_counts(self) -> np.ndarray:
    """`[num_clients]` updates of each client aggregated so far (read-only)."""
    return _read_only(self._simulation.aggregated_counts)

  @property
  def dispatch_counts(self) -> np.ndarray:
    """`[num_clients]` tasks dispatched to each client so far (read-only)."""
    return _read_only(self._simulation.dispatch_counts)

  def download_time(self, client: int, latency: TaskLatency) -> float:
    """Virtual seconds `client` takes to download a model: the latency model's
    `extra_download_time(client)` where it has one, else half the task's communication
    time (a download and an upload of the same size)."""
    extra = getattr(self._simulation.latency, 'extra_download_time', None)
    return float(extra(client)) if extra is not None else latency.communication / 2

  def updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    with_client_params: bool | None = False,
    staleness: Sequence[int] | None = None,
  ) -> UpdateBatch:
    """The results of arrived `handles` as an `UpdateBatch` (`Simulation.updates`); with
    `with_client_params=None`, start params are included if the aggregator needs them."""
    simulation = self._simulation
    if with_client_params is None:
      with_client_params = simulation.aggregator.needs_client_params
    return simulation.updates(handles, weights, with_client_params, staleness)


def _read_only(values: np.ndarray) -> np.ndarray:
  view = values.view()
  view.flags.writeable = False
  return view
