"""Runtime layer: virtual-time event queue, latency models, deferred batched execution."""

from fedsim_jax.runtime.event_loop import SimulationStalled, StopCondition
from fedsim_jax.runtime.events import Event, EventKind, EventQueue
from fedsim_jax.runtime.latency import (
  SPEED_DISTRIBUTIONS,
  AlwaysAvailable,
  Availability,
  LatencyModel,
  PerStepLatency,
  TaskLatency,
)
from fedsim_jax.runtime.scheduler import Scheduler
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import Simulation
from fedsim_jax.runtime.tasks import TaskAccounting, TaskHandle, TaskStatus
from fedsim_jax.runtime.updates import (
  Aggregator,
  ResultRef,
  UpdateBatch,
  stack_results,
  weighted_mean_delta,
)

__all__ = [
  'Event',
  'EventKind',
  'EventQueue',
  'SPEED_DISTRIBUTIONS',
  'AlwaysAvailable',
  'Availability',
  'LatencyModel',
  'PerStepLatency',
  'TaskLatency',
  'Scheduler',
  'SchedulerContext',
  'Simulation',
  'SimulationStalled',
  'StopCondition',
  'TaskAccounting',
  'TaskHandle',
  'TaskStatus',
  'Aggregator',
  'ResultRef',
  'UpdateBatch',
  'stack_results',
  'weighted_mean_delta',
]
