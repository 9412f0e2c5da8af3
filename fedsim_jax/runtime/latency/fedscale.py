"""FedScale-style device latency (Lai et al. 2022, "FedScale: Benchmarking Model and System
Performance of Federated Learning at Scale", Section 4 / the simulator's client completion time).

FedScale gives each client a compute speed (time per sample) and a network bandwidth from
real device traces and computes a task's completion time as

  compute       = 3 * batch_size * local_steps * seconds_per_sample   (backward ~= 2x forward)
  communication = download_bytes / download_bw + upload_bytes / upload_bw

FedScale's traces (AI Benchmark / MobiPerf derived) cannot be downloaded here, so
`synthetic_device_profiles` draws log-normal stand-ins; explicit per-client arrays (for example
loaded from those traces) are accepted as well.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fedsim_jax.runtime.latency.base import (
  LATENCY_MODELS,
  LatencyContext,
  PerClient,
  TaskLatency,
  check_federation,
  jittered,
  per_client_values,
)
from fedsim_jax.settings import ConfigError, Settings, positive, setting

PREFIX = 'latency.kwargs.'

# FedScale's rule: one training sample costs forward + backward ~= 3 forward passes.
FORWARD_BACKWARD_FACTOR = 3.0


class DeviceProfiles(NamedTuple):
  """Per-client compute speed (seconds per sample) and bandwidth (bytes per second)."""

  seconds_per_sample: np.ndarray
  bandwidth: np.ndarray


@dataclasses.dataclass(frozen=True)
class FedScaleSettings(Settings):
  """Settings of `FedScaleLatency` (`latency.name='fedscale'`): explicit per-client speeds and
  bandwidths, or (both None) log-normal stand-ins drawn by `synthetic_device_profiles`."""

  seconds_per_sample: PerClient | None = setting(
    None, per_client_values(optional=True), 'forward seconds per sample (None: synthetic)'
  )
  bandwidth: PerClient | None = setting(
    None, per_client_values(optional=True), 'bytes per second, download (None: synthetic)'
  )
  upload_bandwidth: PerClient | None = setting(
    None, per_client_values(optional=True), 'upload bytes per second (None: bandwidth)'
  )
  bandwidth_scale: float = setting(1.0, positive(), 'multiplies every bandwidth (1/50: low)')
  jitter: float = setting(0.0, positive(allow_zero=True), 'relative per-task std (0: none)')
  median_seconds_per_sample: float = setting(
    0.01, positive(), 'synthetic profiles: median seconds per sample'
  )
  compute_sigma: float = setting(
    0.7, positive(allow_zero=True), 'synthetic profiles: log-normal sigma of compute speed'
  )
  median_bandwidth: float = setting(
    1.25e6, positive(), 'synthetic profiles: median bytes per second'
  )
  bandwidth_sigma: float = setting(
    1.0, positive(allow_zero=True), 'synthetic profiles: log-normal sigma of bandwidth'
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if (self.seconds_per_sample is None) != (self.bandwidth is None):
      raise ConfigError(
        f'{prefix}seconds_per_sample={self.seconds_per_sample!r} / {prefix}bandwidth='
        f'{self.bandwidth!r}: give both (explicit profiles) or neither (synthetic ones)'
      )
    if self.seconds_per_sample is not None:
      for name in PROFILE_SETTINGS:
        if getattr(self, name) != getattr(type(self)(), name):
          raise ConfigError(
            f'{prefix}{name}={getattr(self, name)!r} is invalid with explicit '
            f'seconds_per_sample and bandwidth; allowed: synthetic profile settings only '
            'without them'
          )


PROFILE_SETTINGS = (
  'median_seconds_per_sample',
  'compute_sigma',
  'median_bandwidth',
  'bandwidth_sigma',
)


def _per_client(name: str, value: npt.ArrayLike, num_clients: int) -> np.ndarray:
  """`value` (checked by `FedScaleSettings`) as a float array of shape (num_clients,); a
  scalar applies to every client."""
  array = np.asarray(value, np.float64)
  if array.ndim == 0:
    array = np.full(num_clients, float(array))
  if array.shape != (num_clients,):
    raise ValueError(
      f'{PREFIX}{name} (shape {array.shape}) is invalid; allowed values: a scalar or '
      f'{num_clients} values, one per client'
    )
  return array


def synthetic_device_profiles(
  num_clients: int,
  rng: np.random.Generator,
  *,
  median_seconds_per_sample: float = 0.01,
  compute_sigma: float = 0.7,
  median_bandwidth: float = 1.25e6,
  bandwidth_sigma: float = 1.0,
) -> DeviceProfiles:
  """Log-normal stand-ins for FedScale's device traces (which cannot be downloaded here).

  ln(seconds_per_sample) ~ Normal(ln median_seconds_per_sample, compute_sigma) and
  ln(bandwidth) ~ Normal(ln median_bandwidth, bandwidth_sigma), independent. The defaults
  (10 ms per sample, 1.25 MB/s = 10 Mbit/s, a few-fold spread between median and p95) are
  plausible mobile-device magnitudes, not fitted to FedScale's traces. Compute is drawn first,
  then bandwidth.
  """
  FedScaleSettings(
    median_seconds_per_sample=median_seconds_per_sample,
    compute_sigma=compute_sigma,
    median_bandwidth=median_bandwidth,
    bandwidth_sigma=bandwidth_sigma,
  ).validate(PREFIX)
  check_federation(num_clients, rng)
  seconds_per_sample = rng.lognormal(
    math.log(median_seconds_per_sample), compute_sigma, num_clients
  )
  bandwidth = rng.lognormal(math.log(median_bandwidth), bandwidth_sigma, num_clients)
  return DeviceProfiles(seconds_per_sample, bandwidth)


class FedScaleLatency:
  """FedScale completion time: per client speed and bandwidth, fixed for the whole run.

  `per_step = 3 * batch_size * seconds_per_sample[i]` and
  `communication = model_bytes / (download_bw[i] * s) + upload_bytes / (upload_bw[i] * s)`, with
  `s = bandwidth_scale` (e.g. 1/50 for FedASMU's low-bandwidth runs). FedScale charges the full
  batch even when a client holds fewer examples; this model does the same. Without `jitter`,
  `sample` is deterministic and draws nothing. With `jitter` j > 0, each task's per-step time and
  communication time are drawn (in that order) from N(x, (j x)^2) truncated to positive values
  by redrawing, as in `base.positive_normal`.

  Args:
    num_clients: federation size.
    rng: this model's own generator (only used for jitter).
    batch_size: examples per local step.
    seconds_per_sample: per client compute time of one forward pass of one sample (scalar or
      array).
    bandwidth: per client bytes per second (download, and upload unless `upload_bandwidth`).
    model_bytes: bytes transferred each way.
    bandwidth_scale: multiplies every bandwidth.
    upload_bandwidth: per client upload bytes per second (defaults to `bandwidth`).
    jitter: relative per-task standard deviation (0 disables it).
    upload_bytes: bytes of one uploaded update (compressed updates; default `model_bytes`).
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    batch_size: int,
    seconds_per_sample: PerClient,
    bandwidth: PerClient,
    model_bytes: int,
    bandwidth_scale: float = 1.0,
    upload_bandwidth: PerClient | None = None,
    jitter: float = 0.0,
    upload_bytes: int | None = None,
  ) -> None:
    check_federation(num_clients, rng)
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
      raise ValueError(f'latency.batch_size={batch_size!r}; must be an int >= 1')
    if not isinstance(model_bytes, (int, np.integer)) or model_bytes < 0:
      raise ValueError(f'latency.model_bytes={model_bytes!r}; must be an int >= 0')
    FedScaleSettings(
      seconds_per_sample=seconds_per_sample,
      bandwidth=bandwidth,
      upload_bandwidth=upload_bandwidth,
      bandwidth_scale=bandwidth_scale,
      jitter=jitter,
    ).validate(PREFIX)
    self.rng = rng
    self.batch_size = int(batch_size)
    self.model_bytes = int(model_bytes)
    self.bandwidth_scale = float(bandwidth_scale)
    self.jitter = float(jitter)
    self.seconds_per_sample = _per_client('seconds_per_sample', seconds_per_sample, num_clients)
    self.download_bandwidth = _per_client('bandwidth', bandwidth, num_clients)
    self.upload_bandwidth = (
      self.download_bandwidth.copy()
      if upload_bandwidth is None
      else _per_client('upload_bandwidth', upload_bandwidth, num_clients)
    )
    self.step_time = FORWARD_BACKWARD_FACTOR * self.batch_size * self.seconds_per_sample
    scaled = self.bandwidth_scale
    self.upload_bytes = self.model_bytes if upload_bytes is None else int(upload_bytes)
    self.communication_time = self.model_bytes / (
      self.download_bandwidth * scaled
    ) + self.upload_bytes / (self.upload_bandwidth * scaled)

  def download_time(self, client_id: int) -> float:
    """Seconds of one model download (e.g. FedASMU's extra mid-training fetch)."""
    return self.model_bytes / (float(self.download_bandwidth[client_id]) * self.bandwidth_scale)

  def expected_step_time(self, client_id: int) -> float:
    return float(self.step_time[client_id])

  def sample(self, client_id: int) -> TaskLatency:
    step_time = jittered(self.rng, self.step_time[client_id], self.jitter)
    comm = float(self.communication_time[client_id])
    if comm > 0:  # model_bytes == 0 means no transfer, nothing to jitter
      comm = jittered(self.rng, comm, self.jitter)
    return TaskLatency(communication=comm, overhead=0.0, per_step=step_time)


@LATENCY_MODELS.register('fedscale', FedScaleSettings)
def fedscale(settings: FedScaleSettings, context: LatencyContext) -> FedScaleLatency:
  """3 x batch x steps x seconds per sample + model bytes / bandwidth, down and up (FedScale).

  Without explicit profiles, log-normal ones are drawn first (compute, then bandwidth)."""
  seconds_per_sample, bandwidth = settings.seconds_per_sample, settings.bandwidth
  if seconds_per_sample is None or bandwidth is None:
    profiles = synthetic_device_profiles(
      context.num_clients,
      context.rng,
      **{name: getattr(settings, name) for name in PROFILE_SETTINGS},
    )
    seconds_per_sample, bandwidth = profiles.seconds_per_sample, profiles.bandwidth
  return FedScaleLatency(
    context.num_clients,
    context.rng,
    batch_size=context.batch_size,
    seconds_per_sample=seconds_per_sample,
    bandwidth=bandwidth,
    model_bytes=context.model_bytes,
    bandwidth_scale=settings.bandwidth_scale,
    upload_bandwidth=settings.upload_bandwidth,
    jitter=settings.jitter,
    upload_bytes=context.upload_bytes,
  )
