"""The registries of latency and availability models, with the library's models registered.

Models and their papers: `per_step` FedCompass (Li et al. 2024, Sec. 5.4, App. G.2);
`lognormal` Hard et al., "Learning from straggler clients in federated learning", Sec. 3;
`fedscale` Lai et al. 2022, "FedScale", Sec. 4; `device_ratio` FedASMU (Liu et al. 2024,
appendix "Experiment details"); `trace` replays a device trace (see `trace`); availability
`always`, `periodic` and `trace`. Each module registers its models with their settings
dataclasses; a config selects one with `latency.name` / `latency.kwargs` (`availability.*`), and
a user module (`latency.module`) may register more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim_jax.registry import Selection
from fedsim_jax.runtime.latency import device_ratio, fedscale, per_step, straggler, trace
from fedsim_jax.runtime.latency.base import (
  AVAILABILITY_MODELS,
  LATENCY_MODELS,
  Availability,
  AvailabilityContext,
  LatencyContext,
  LatencyModel,
)

del device_ratio, fedscale, per_step, straggler, trace  # imported to register their models


def build_latency(selection: Selection, context: LatencyContext) -> LatencyModel:
  """The latency model a resolved `latency` section selects, built for `context`."""
  return LATENCY_MODELS.get(selection.name).factory(selection.settings, context)


def build_availability(selection: Selection, context: AvailabilityContext) -> Availability:
  """The availability model a resolved `availability` section selects, built for `context`."""
  return AVAILABILITY_MODELS.get(selection.name).factory(selection.settings, context)


def make_latency(
  name: str,
  *,
  num_clients: int,
  rng: np.random.Generator,
  client_sizes: np.ndarray,
  batch_size: int,
  model_bytes: int,
  straggler_mask: np.ndarray | None = None,
  **settings: Any,
) -> LatencyModel:
  """Latency model `name` with keyword `settings` (its settings dataclass's fields) for a
  federation described by the other arguments: `build_latency` in one call. Raises
  `ConfigError` naming `latency.name` or `latency.kwargs.<field>`."""
  context = LatencyContext(num_clients, rng, client_sizes, batch_size, model_bytes, straggler_mask)
  return build_latency(LATENCY_MODELS.resolve(name, settings), context)


def make_availability(
  name: str, *, num_clients: int, rng: np.random.Generator, **settings: Any
) -> Availability:
  """Availability model `name` with keyword `settings`: `build_availability` in one call."""
  context = AvailabilityContext(num_clients, rng)
  return build_availability(AVAILABILITY_MODELS.resolve(name, settings), context)
