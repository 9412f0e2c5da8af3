"""Fastest-to-slowest device ratio latency of FedASMU (Liu et al., "FedASMU: Efficient
Asynchronous Federated Learning with Dynamic Staleness-aware Model Update", Appendix
"Experiment details").

PAPER: "the training time of the slowest device is five times longer than that of the fastest
device, and the training time of each device is independently and randomly sampled within this
range"; the stronger-heterogeneity experiment "augment[s] the difference ... between the fastest
device and the lowest device while randomly sample the local training time for the other
devices". Communication grows as bandwidth shrinks ("50 times lower" / "100 times smaller" than
normal); FedASMU adds one extra download of a fresh global model during local training.

Choices (the paper does not state them): the sampling is uniform; a device's step time is drawn
once for the whole run; clients 0 and 1 are pinned to the fastest and slowest step time so the
ratio is met exactly when num_clients >= 2 ("the fastest" and "the slowest" device exist), and
the others are uniform in between.
"""

from __future__ import annotations

import math

import numpy as np

from fedsim_jax.runtime.latency.base import TaskLatency, jittered


class DeviceRatioLatency:
  """Per-device step time uniform in [fastest, ratio * fastest], fixed per device.

  Communication per task (download + upload) is either `communication_time / bandwidth_scale`
  or, with `bandwidth`, `2 * model_bytes / (bandwidth * bandwidth_scale)`; neither gives 0.
  With `jitter` j > 0, each task's step time is N(t_i, (j t_i)^2) truncated to positive values.

  Args:
    num_clients: federation size.
    rng: this model's own generator (step times drawn at construction; jitter per task).
    fastest_step_time: seconds per local step of the fastest device.
    ratio: slowest / fastest step time (FedASMU default 5).
    communication_time: fixed seconds of download + upload per task at normal bandwidth.
    model_bytes: bytes transferred each way (with `bandwidth`).
    bandwidth: bytes per second, scalar or per client (with `model_bytes`).
    bandwidth_scale: multiplies the bandwidth (1/50, 1/100 for FedASMU's low-bandwidth runs).
    jitter: relative per-task standard deviation of the step time.
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    fastest_step_time: float,
    ratio: float = 5.0,
    communication_time: float | None = None,
    model_bytes: int | None = None,
    bandwidth: np.ndarray | float | None = None,
    bandwidth_scale: float = 1.0,
    jitter: float = 0.0,
  ) -> None:
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
      raise ValueError(f'latency.num_clients={num_clients!r}; must be an int >= 1')
    if not isinstance(rng, np.random.Generator):
      raise ValueError(f'latency.rng={rng!r}; must be a numpy Generator')
    if not (math.isfinite(fastest_step_time) and fastest_step_time > 0):
      raise ValueError(f'latency.fastest_step_time={fastest_step_time}; must be finite and > 0')
    if not (math.isfinite(ratio) and ratio >= 1):
      raise ValueError(f'latency.ratio={ratio}; must be finite and >= 1')
    if not (math.isfinite(bandwidth_scale) and bandwidth_scale > 0):
      raise ValueError(f'latency.bandwidth_scale={bandwidth_scale}; must be finite and > 0')
    if not (math.isfinite(jitter) and jitter >= 0):
      raise ValueError(f'latency.jitter={jitter}; must be finite and >= 0')
    if communication_time is not None and (bandwidth is not None or model_bytes is not None):
      raise ValueError(
        f'latency.communication_time={communication_time}; give either it or '
        'model_bytes with bandwidth, not both'
      )
    if (bandwidth is None) != (model_bytes is None):
      raise ValueError(
        f'latency.bandwidth={bandwidth!r}; model_bytes={model_bytes!r}; give both or neither'
      )
    self.rng = rng
    self.fastest_step_time = float(fastest_step_time)
    self.ratio = float(ratio)
    self.bandwidth_scale = float(bandwidth_scale)
    self.jitter = float(jitter)
    if bandwidth is not None:
      if not isinstance(model_bytes, (int, np.integer)) or model_bytes < 0:
        raise ValueError(f'latency.model_bytes={model_bytes!r}; must be an int >= 0')
      bw = np.asarray(bandwidth, np.float64)
      if bw.ndim == 0:
        bw = np.full(num_clients, float(bw))
      if bw.shape != (num_clients,) or not np.all(np.isfinite(bw)) or np.any(bw <= 0):
        raise ValueError(
          f'latency.bandwidth (shape {bw.shape}); must be a scalar or '
          f'{num_clients} finite values > 0'
        )
      self._download = model_bytes / (bw * self.bandwidth_scale)
    else:
      comm = 0.0 if communication_time is None else communication_time
      if not (math.isfinite(comm) and comm >= 0):
        raise ValueError(
          f'latency.communication_time={communication_time}; must be finite and >= 0'
        )
      # A symmetric link: half the round trip is the download.
      self._download = np.full(num_clients, comm / 2 / self.bandwidth_scale)
    self.communication_time = 2 * self._download
    # Draw all clients first, then pin, so the number of draws does not depend on num_clients.
    slowest = self.ratio * self.fastest_step_time
    self.step_time = rng.uniform(self.fastest_step_time, slowest, num_clients)
    self.step_time[0] = self.fastest_step_time
    if num_clients >= 2:
      self.step_time[1] = slowest

  def extra_download_time(self, client_id: int = 0) -> float:
    """Seconds of one extra model download (FedASMU's mid-training fetch of a fresh model)."""
    return float(self._download[client_id])

  def expected_step_time(self, client_id: int) -> float:
    return float(self.step_time[client_id])

  def sample(self, client_id: int) -> TaskLatency:
    step_time = jittered(self.rng, self.step_time[client_id], self.jitter)
    return TaskLatency(
      communication=float(self.communication_time[client_id]), overhead=0.0, per_step=step_time
    )
