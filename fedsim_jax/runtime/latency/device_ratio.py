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

import dataclasses

import numpy as np

from fedsim_jax.runtime.latency.base import (
  LATENCY_MODELS,
  LatencyContext,
  PerClient,
  TaskLatency,
  check_federation,
  jittered,
  per_client_values,
)
from fedsim_jax.settings import ConfigError, Settings, number, positive, setting

PREFIX = 'latency.kwargs.'


@dataclasses.dataclass(frozen=True)
class DeviceRatioSettings(Settings):
  """Settings of `DeviceRatioLatency` (`latency.name='device_ratio'`)."""

  fastest_step_time: float = setting(0.1, positive(), 'seconds per local step, fastest device')
  ratio: float = setting(5.0, number(minimum=1), 'slowest / fastest step time (FedASMU: 5)')
  communication_time: float | None = setting(
    None, positive(allow_zero=True, optional=True), 'download + upload seconds per task (None: 0)'
  )
  model_bytes: int | None = setting(
    None,
    positive(integer=True, allow_zero=True, optional=True),
    "bytes each way with bandwidth (None: the model's size)",
  )
  bandwidth: PerClient | None = setting(
    None, per_client_values(optional=True), 'bytes per second, one value or one per client'
  )
  bandwidth_scale: float = setting(1.0, positive(), 'multiplies the bandwidth (1/50: low)')
  jitter: float = setting(0.0, positive(allow_zero=True), 'relative per-task std of step time')

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.communication_time is not None and (
      self.bandwidth is not None or self.model_bytes is not None
    ):
      raise ConfigError(
        f'{prefix}communication_time={self.communication_time!r} is invalid with '
        f'{prefix}bandwidth; allowed: communication_time, or bandwidth (and model_bytes)'
      )
    if self.model_bytes is not None and self.bandwidth is None:
      raise ConfigError(
        f'{prefix}model_bytes={self.model_bytes!r} is invalid without {prefix}bandwidth; '
        'allowed: model_bytes with a bandwidth, or None'
      )


class DeviceRatioLatency:
  """Per-device step time uniform in [fastest, ratio * fastest], fixed per device.

  Communication per task (download + upload) is either `communication_time / bandwidth_scale`
  or, with `bandwidth`, `(1 + upload_fraction) * model_bytes / (bandwidth * bandwidth_scale)`
  (a compressed upload sends `upload_fraction` of the model's bytes); neither gives 0.
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
    upload_fraction: an upload's bytes over a download's (compressed updates: below 1), with
      `bandwidth`.
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
    bandwidth: PerClient | None = None,
    bandwidth_scale: float = 1.0,
    jitter: float = 0.0,
    upload_fraction: float = 1.0,
  ) -> None:
    check_federation(num_clients, rng)
    DeviceRatioSettings(
      fastest_step_time,
      ratio,
      communication_time,
      model_bytes,
      bandwidth,
      bandwidth_scale,
      jitter,
    ).validate(PREFIX)
    if bandwidth is not None and model_bytes is None:
      raise ValueError(f'{PREFIX}bandwidth={bandwidth!r} needs model_bytes; give both or neither')
    self.rng = rng
    self.fastest_step_time = float(fastest_step_time)
    self.ratio = float(ratio)
    self.bandwidth_scale = float(bandwidth_scale)
    self.jitter = float(jitter)
    if bandwidth is not None and model_bytes is not None:
      bw = np.asarray(bandwidth, np.float64)
      if bw.ndim == 0:
        bw = np.full(num_clients, float(bw))
      if bw.shape != (num_clients,):
        raise ValueError(
          f'{PREFIX}bandwidth (shape {bw.shape}) is invalid; allowed values: a scalar or '
          f'{num_clients} values, one per client'
        )
      self._download = model_bytes / (bw * self.bandwidth_scale)
    else:
      comm = 0.0 if communication_time is None else communication_time
      # A symmetric link: half the round trip is the download.
      self._download = np.full(num_clients, comm / 2 / self.bandwidth_scale)
    # With a bandwidth, a compressed upload takes its share of a download's time.
    upload = self._download * (upload_fraction if bandwidth is not None else 1.0)
    self.communication_time = self._download + upload
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


@LATENCY_MODELS.register('device_ratio', DeviceRatioSettings)
def device_ratio(settings: DeviceRatioSettings, context: LatencyContext) -> DeviceRatioLatency:
  """Per-device step times within a fastest-to-slowest ratio (FedASMU)."""
  values = settings.as_dict()
  if settings.bandwidth is not None and settings.model_bytes is None:
    values['model_bytes'] = context.model_bytes
  if settings.bandwidth is not None:
    values['upload_fraction'] = context.upload_fraction
  return DeviceRatioLatency(context.num_clients, context.rng, **values)
