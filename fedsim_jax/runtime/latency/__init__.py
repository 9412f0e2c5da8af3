"""Latency and availability models (see `base` for the interfaces, `registry` for the names)."""

from fedsim_jax.runtime.latency.base import (
  AlwaysAvailable,
  Availability,
  LatencyModel,
  TaskLatency,
  available_clients,
  jittered,
  positive_normal,
)
from fedsim_jax.runtime.latency.device_ratio import DeviceRatioLatency
from fedsim_jax.runtime.latency.fedscale import (
  DeviceProfiles,
  FedScaleLatency,
  synthetic_device_profiles,
)
from fedsim_jax.runtime.latency.per_step import SPEED_DISTRIBUTIONS, PerStepLatency
from fedsim_jax.runtime.latency.registry import (
  AVAILABILITY_MODELS,
  LATENCY_MODELS,
  make_availability,
  make_latency,
)
from fedsim_jax.runtime.latency.straggler import (
  LOGNORMAL_MODELS,
  PAPER_TABLES,
  LogNormalLatency,
  closed_form_means,
)
from fedsim_jax.runtime.latency.trace import (
  ClientTrace,
  PeriodicAvailability,
  Trace,
  TraceAvailability,
  TraceLatency,
  WindowAvailability,
  load_trace,
)

__all__ = [
  'AlwaysAvailable',
  'Availability',
  'LatencyModel',
  'TaskLatency',
  'available_clients',
  'jittered',
  'positive_normal',
  'DeviceRatioLatency',
  'DeviceProfiles',
  'FedScaleLatency',
  'synthetic_device_profiles',
  'SPEED_DISTRIBUTIONS',
  'PerStepLatency',
  'AVAILABILITY_MODELS',
  'LATENCY_MODELS',
  'make_availability',
  'make_latency',
  'LOGNORMAL_MODELS',
  'PAPER_TABLES',
  'LogNormalLatency',
  'closed_form_means',
  'ClientTrace',
  'PeriodicAvailability',
  'Trace',
  'TraceAvailability',
  'TraceLatency',
  'WindowAvailability',
  'load_trace',
]
