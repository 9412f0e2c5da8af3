"""Runtime layer: virtual-time event queue, latency models, deferred batched execution."""

from fedsim_jax.runtime.events import Event, EventKind, EventQueue
from fedsim_jax.runtime.latency import (
  SPEED_DISTRIBUTIONS,
  AlwaysAvailable,
  Availability,
  LatencyModel,
  PerStepLatency,
  TaskLatency,
)
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import (
  Scheduler,
  Simulation,
  SimulationStalled,
  StopCondition,
  TaskAccounting,
  TaskHandle,
)
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
  'Aggregator',
  'ResultRef',
  'UpdateBatch',
  'stack_results',
  'weighted_mean_delta',
]
