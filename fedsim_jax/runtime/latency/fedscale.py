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

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fedsim_jax.runtime.latency.base import TaskLatency, jittered

# FedScale's rule: one training sample costs forward + backward ~= 3 forward passes.
FORWARD_BACKWARD_FACTOR = 3.0


class DeviceProfiles(NamedTuple):
  """Per-client compute speed (seconds per sample) and bandwidth (bytes per second)."""

  seconds_per_sample: np.ndarray
  bandwidth: np.ndarray


def _per_client(
  name: str, value: npt.ArrayLike, num_clients: int, *, allow_zero: bool = False
) -> np.ndarray:
  """`value` as a float array of shape (num_clients,); a scalar applies to every client."""
  array = np.asarray(value, np.float64)
  if array.ndim == 0:
    array = np.full(num_clients, float(array))
  bad = (
    array.shape != (num_clients,)
    or not np.all(np.isfinite(array))
    or (np.any(array < 0) if allow_zero else np.any(array <= 0))
  )
  if bad:
    bound = '>= 0' if allow_zero else '> 0'
    raise ValueError(
      f'latency.{name} (shape {array.shape}); must be a scalar or {num_clients} '
      f'finite values {bound}'
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
  for name, value in (
    ('median_seconds_per_sample', median_seconds_per_sample),
    ('median_bandwidth', median_bandwidth),
  ):
    if not (math.isfinite(value) and value > 0):
      raise ValueError(f'latency.{name}={value}; must be finite and > 0')
  for name, value in (('compute_sigma', compute_sigma), ('bandwidth_sigma', bandwidth_sigma)):
    if not (math.isfinite(value) and value >= 0):
      raise ValueError(f'latency.{name}={value}; must be finite and >= 0')
  if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
    raise ValueError(f'latency.num_clients={num_clients!r}; must be an int >= 1')
  seconds_per_sample = rng.lognormal(
    math.log(median_seconds_per_sample), compute_sigma, num_clients
  )
  bandwidth = rng.lognormal(math.log(median_bandwidth), bandwidth_sigma, num_clients)
  return DeviceProfiles(seconds_per_sample, bandwidth)


class FedScaleLatency:
  """FedScale completion time: per client speed and bandwidth, fixed for the whole run.

  `per_step = 3 * batch_size * seconds_per_sample[i]` and
  `communication = model_bytes / (download_bw[i] * s) + model_bytes / (upload_bw[i] * s)`, with
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
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    batch_size: int,
    seconds_per_sample: np.ndarray | float,
    bandwidth: np.ndarray | float,
    model_bytes: int,
    bandwidth_scale: float = 1.0,
    upload_bandwidth: np.ndarray | float | None = None,
    jitter: float = 0.0,
  ) -> None:
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
      raise ValueError(f'latency.num_clients={num_clients!r}; must be an int >= 1')
    if not isinstance(rng, np.random.Generator):
      raise ValueError(f'latency.rng={rng!r}; must be a numpy Generator')
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
      raise ValueError(f'latency.batch_size={batch_size!r}; must be an int >= 1')
    if not isinstance(model_bytes, (int, np.integer)) or model_bytes < 0:
      raise ValueError(f'latency.model_bytes={model_bytes!r}; must be an int >= 0')
    if not (math.isfinite(bandwidth_scale) and bandwidth_scale > 0):
      raise ValueError(f'latency.bandwidth_scale={bandwidth_scale}; must be finite and > 0')
    if not (math.isfinite(jitter) and jitter >= 0):
      raise ValueError(f'latency.jitter={jitter}; must be finite and >= 0')
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
    self.communication_time = self.model_bytes / (
      self.download_bandwidth * scaled
    ) + self.model_bytes / (self.upload_bandwidth * scaled)

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
