"""What a checkpoint of a simulation holds, and how it is restored.

A simulation's state is everything in it that changes as it runs, as plain data (pytrees, numpy
arrays and generators, dataclasses, the scheduler); the rest (executor, aggregator, callbacks)
is rebuilt from the run's config. It is stored as one dict keyed by the names in `STORED`
below: the layout of every checkpoint written so far, so a name never changes, whichever part
of the simulation holds the value now. Values keep their identity across the dict (a task
handle in the event queue, the task table and the scheduler's buffer is one object), which
pickling preserves.
"""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedList

# Stored name -> where the simulation holds it (an attribute, or a part's attribute), in the
# order checkpoints have always stored them.
STORED: dict[str, str] = {
  'scheduler': 'scheduler',
  'latency': 'latency',
  'availability': 'clients.availability',
  'client_sizes': 'client_sizes',
  'rng': 'rng',
  'deferred': 'deferred',
  'bucket_bits': 'bucket_bits',
  'aggregate': 'aggregate',
  'stall_events': 'loop.stall_events',
  '_events_without_progress': 'loop.events_without_progress',
  '_most_held': 'loop.most_held',
  '_most_in_flight': 'loop.most_in_flight',
  'server_state': 'server_state',
  'queue': 'loop.queue',
  'now': 'now',
  'version': 'version',
  'accounting': 'outcomes.accounting',
  'executor_batches': 'tasks.executor_batches',
  'executed_tasks': 'tasks.executed_tasks',
  'gradient_steps': 'outcomes.gradient_steps',
  'dispatch_counts': 'outcomes.dispatch_counts',
  'aggregated_counts': 'outcomes.aggregated_counts',
  'busy_time': 'outcomes.busy_time',
  'steps_per_client': 'outcomes.steps_per_client',
  'update_wait_time': 'outcomes.update_wait_time',
  'discarded_counts': 'outcomes.discarded_counts',
  'staleness_counts': 'outcomes.staleness_counts',
  'window_staleness_counts': 'outcomes.window_staleness_counts',
  'wasted_steps': 'outcomes.wasted_steps',
  '_unresolved': 'tasks.unresolved',
  '_busy': 'clients.busy',
  '_not_busy': 'clients.not_busy',
  '_always_available': 'clients.always_available',
  '_pending': 'tasks.pending',
  '_held_results': 'tasks.held_results',
  '_next_task_id': 'tasks.next_task_id',
  '_started': 'loop.started',
}


def _owner_and_name(simulation: Any, path: str) -> tuple[Any, str]:
  owner, _, name = path.rpartition('.')
  return (getattr(simulation, owner) if owner else simulation), name


def stored_state(simulation: Any) -> dict[str, Any]:
  """`simulation`'s state under the stored names (call `TaskTable.compact_results` first)."""
  state = {}
  for stored, path in STORED.items():
    owner, name = _owner_and_name(simulation, path)
    state[stored] = getattr(owner, name)
  return state


def restore_state(simulation: Any, state: dict[str, Any]) -> None:
  """Sets `simulation`'s state from `stored_state` of a simulation built from the same
  config; names a checkpoint lacks keep their built values."""
  unknown = sorted(set(state) - set(STORED))
  if unknown:
    raise ValueError(f'not simulation state: {unknown}')
  for stored, value in state.items():
    owner, name = _owner_and_name(simulation, STORED[stored])
    setattr(owner, name, value)
  clients = simulation.clients
  if not isinstance(clients.not_busy, SortedList):  # checkpoints before it was one
    clients.not_busy = SortedList(clients.not_busy)
