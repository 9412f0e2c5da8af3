"""Name -> constructor mapping of latency and availability models (for configs).

Models and their papers: `per_step` FedCompass (Li et al. 2024, Sec. 5.4, App. G.2);
`lognormal` Hard et al., "Learning from straggler clients in federated learning", Sec. 3;
`fedscale` Lai et al. 2022, "FedScale", Sec. 4; `device_ratio` FedASMU (Liu et al. 2024,
appendix "Experiment details"); `trace` replays a device trace (see `trace`). Settings are the
constructors' keyword arguments; the factories only fill in what the federation already knows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsim_jax.runtime.latency.base import AlwaysAvailable, Availability, LatencyModel
from fedsim_jax.runtime.latency.device_ratio import DeviceRatioLatency
from fedsim_jax.runtime.latency.fedscale import FedScaleLatency, synthetic_device_profiles
from fedsim_jax.runtime.latency.per_step import PerStepLatency
from fedsim_jax.runtime.latency.straggler import LogNormalLatency
from fedsim_jax.runtime.latency.trace import PeriodicAvailability, TraceAvailability, TraceLatency

LATENCY_MODELS = ('per_step', 'lognormal', 'fedscale', 'device_ratio', 'trace')
AVAILABILITY_MODELS = ('always', 'periodic', 'trace')


def _keyword_names(*functions: Callable[..., Any]) -> tuple[str, ...]:
  return tuple(
    name
    for f in functions
    for name, p in inspect.signature(f).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
  )


def _check_settings(
  prefix: str, name: str, settings: dict[str, Any], allowed: tuple[str, ...]
) -> None:
  unknown = sorted(set(settings) - set(allowed))
  if unknown:
    raise ValueError(
      f'{prefix}.{unknown[0]}={settings[unknown[0]]!r}; unknown setting of '
      f'{name!r}; allowed: {tuple(sorted(allowed))}'
    )


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
  """Builds latency model `name` (one of `LATENCY_MODELS`) from keyword `settings`.

  Filled in from the federation: `lognormal` gets examples_per_step = min(batch_size,
  client_sizes) and `straggler_mask`; `fedscale` gets batch_size and model_bytes, and, when
  neither seconds_per_sample nor bandwidth is given, draws them with
  `synthetic_device_profiles` (whose keyword arguments are then accepted as settings);
  `device_ratio` gets model_bytes when a bandwidth is set. The other arguments are ignored by
  models that do not need them.
  """
  if name == 'per_step':
    _check_settings('latency', name, settings, _keyword_names(PerStepLatency))
    return PerStepLatency(num_clients, rng, **settings)
  if name == 'lognormal':
    allowed = tuple(
      n
      for n in _keyword_names(LogNormalLatency)
      if n not in ('examples_per_step', 'straggler_mask')
    )
    _check_settings('latency', name, settings, allowed)
    sizes = np.asarray(client_sizes, np.int64)
    return LogNormalLatency(
      num_clients,
      rng,
      examples_per_step=np.minimum(batch_size, sizes),
      straggler_mask=straggler_mask,
      **settings,
    )
  if name == 'fedscale':
    profile_names = _keyword_names(synthetic_device_profiles)
    allowed = (
      tuple(n for n in _keyword_names(FedScaleLatency) if n not in ('batch_size', 'model_bytes'))
      + profile_names
    )
    _check_settings('latency', name, settings, allowed)
    profile_settings = {k: settings.pop(k) for k in profile_names if k in settings}
    if 'seconds_per_sample' not in settings and 'bandwidth' not in settings:
      profiles = synthetic_device_profiles(num_clients, rng, **profile_settings)
      settings.update(seconds_per_sample=profiles.seconds_per_sample, bandwidth=profiles.bandwidth)
    elif profile_settings:
      raise ValueError(
        f'latency.{next(iter(profile_settings))}; synthetic profile settings '
        'conflict with explicit seconds_per_sample/bandwidth'
      )
    return FedScaleLatency(
      num_clients, rng, batch_size=batch_size, model_bytes=model_bytes, **settings
    )
  if name == 'device_ratio':
    _check_settings('latency', name, settings, _keyword_names(DeviceRatioLatency))
    if 'bandwidth' in settings:
      settings.setdefault('model_bytes', model_bytes)
    return DeviceRatioLatency(num_clients, rng, **settings)
  if name == 'trace':
    _check_settings('latency', name, settings, _keyword_names(TraceLatency))
    return TraceLatency(num_clients, rng, **settings)
  raise ValueError(f'latency.model={name!r}; allowed: {LATENCY_MODELS}')


def make_availability(
  name: str, *, num_clients: int, rng: np.random.Generator, **settings: Any
) -> Availability:
  """Builds availability model `name` (one of `AVAILABILITY_MODELS`) from keyword `settings`."""
  if name == 'always':
    _check_settings('availability', name, settings, ())
    return AlwaysAvailable()
  if name == 'periodic':
    _check_settings('availability', name, settings, _keyword_names(PeriodicAvailability))
    return PeriodicAvailability(num_clients, rng, **settings)
  if name == 'trace':
    _check_settings('availability', name, settings, _keyword_names(TraceAvailability))
    return TraceAvailability(num_clients, rng, **settings)
  raise ValueError(f'availability.model={name!r}; allowed: {AVAILABILITY_MODELS}')
