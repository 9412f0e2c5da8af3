"""Interfaces of latency and availability models.

A latency model turns a dispatched task into virtual seconds. It draws a `TaskLatency` per task
(before the number of local steps is fixed, so that a scheduler can fit steps into a time
limit); the task then lasts `TaskLatency.duration(num_steps)`. Durations never depend on
trained weights. Every model owns a numpy generator derived from the run seed and
draws from it once per task, in dispatch order, so runs are reproducible.

Latency and availability models are plugins: each is registered in `LATENCY_MODELS` or
`AVAILABILITY_MODELS` under a name with its settings dataclass (`latency.name`,
`latency.kwargs`), and its factory receives those settings and what the federation already
knows (`LatencyContext`, `AvailabilityContext`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from fedsim_jax.registry import Registry
from fedsim_jax.settings import Check, ConfigError, Settings


class TaskLatency(NamedTuple):
  """One task's latency components, in virtual seconds.

  Attributes:
    communication: download plus upload time.
    overhead: fixed on-device time independent of the work (start-up, turn-down; the
      straggler paper's C).
    per_step: on-device compute time of one local step.
  """

  communication: float
  overhead: float
  per_step: float

  def compute_time(self, num_steps: int) -> float:
    return self.overhead + self.per_step * num_steps

  def duration(self, num_steps: int) -> float:
    return self.communication + self.compute_time(num_steps)

  def steps_within(self, time_limit: float, include_overhead: bool = True) -> int:
    """Most local steps whose compute time fits in `time_limit` (communication excluded)."""
    budget = time_limit - (self.overhead if include_overhead else 0.0)
    if budget <= 0:
      return 0
    return int(math.floor(budget / self.per_step + 1e-9))


class LatencyModel(Protocol):
  """Draws task latencies for clients."""

  def sample(self, client_id: int) -> TaskLatency:
    """The latency of the next task of `client_id` (one call per dispatched task)."""
    ...

  def expected_step_time(self, client_id: int) -> float:
    """The client's mean compute seconds per local step (used to tier clients by speed)."""
    ...


class Availability(Protocol):
  """When clients are online. Answers with times, never with a boolean poll."""

  def next_available(self, client_id: int, time: float) -> float:
    """Earliest time >= `time` at which the client is online (`math.inf` if never again)."""
    ...

  def online_until(self, client_id: int, time: float) -> float:
    """End of the online window containing `time` (`math.inf` if it never ends). Only called
    for a client that is online at `time`."""
    ...


# A value per client: one for every client, or a sequence (array) of one per client.
PerClient = float | tuple[float, ...] | np.ndarray


def per_client_values(*, allow_zero: bool = False, optional: bool = False) -> Check:
  """A finite number > 0 (>= 0 with `allow_zero`) for every client, or a sequence (array) of
  such numbers, one per client (their count is checked against the federation when built)."""
  bound = '>= 0' if allow_zero else '> 0'
  allowed = f'a finite number {bound} or a sequence of them, one per client'
  allowed += ' or None' if optional else ''

  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    try:
      array = np.asarray(value, np.float64)
    except (TypeError, ValueError):
      array = np.array(np.nan)
    ok = (
      not isinstance(value, (bool, str))
      and array.ndim <= 1
      and bool(np.all(np.isfinite(array)))
      and bool(np.all(array >= 0 if allow_zero else array > 0))
    )
    if not ok:
      raise ConfigError(f'{name}={value!r} is invalid; allowed values: {allowed}')

  check.allowed = allowed  # type: ignore[attr-defined]
  return check


def check_federation(num_clients: object, rng: object, prefix: str = 'latency') -> None:
  """Raises unless `num_clients` is an int >= 1 and `rng` a numpy Generator (what every model's
  constructor receives from the run, not from settings)."""
  if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
    raise ValueError(f'{prefix}.num_clients={num_clients!r}; must be an int >= 1')
  if not isinstance(rng, np.random.Generator):
    raise ValueError(f'{prefix}.rng={rng!r}; must be a numpy Generator')


@dataclasses.dataclass(frozen=True)
class LatencyContext:
  """What a latency model's factory knows of the run besides its settings.

  Attributes:
    num_clients: federation size.
    rng: the model's own generator (derived from the run seed; draw from nothing else).
    client_sizes: examples per client.
    batch_size: examples per local step (`client.batch_size`).
    model_bytes: bytes of one model's parameters (one transfer each way).
    straggler_mask: True for straggler clients (the straggler-domain split), or None.
    upload_bytes: bytes of one client update as sent (compressed: `compression`); None: the
      model's size.
  """

  num_clients: int
  rng: np.random.Generator
  client_sizes: np.ndarray
  batch_size: int
  model_bytes: int
  straggler_mask: np.ndarray | None = None
  upload_bytes: int | None = None

  @property
  def upload_fraction(self) -> float:
    """An upload's bytes over a download's (1 without compression)."""
    return 1.0 if self.upload_bytes is None else self.upload_bytes / max(self.model_bytes, 1)


@dataclasses.dataclass(frozen=True)
class AvailabilityContext:
  """What an availability model's factory knows of the run besides its settings."""

  num_clients: int
  rng: np.random.Generator


LatencyFactory = Callable[[Any, LatencyContext], LatencyModel]
AvailabilityFactory = Callable[[Any, AvailabilityContext], Availability]

# The registered models (`fedsim_jax.runtime.latency` imports the library's, each module
# registering its own).
LATENCY_MODELS: Registry[LatencyFactory] = Registry('latency', 'latency model')
AVAILABILITY_MODELS: Registry[AvailabilityFactory] = Registry('availability', 'availability model')


@dataclasses.dataclass(frozen=True)
class AlwaysSettings(Settings):
  """No settings: every client is online at all times."""


class AlwaysAvailable:
  """Every client is online at all times."""

  def next_available(self, client_id: int, time: float) -> float:
    del client_id
    return time

  def online_until(self, client_id: int, time: float) -> float:
    del client_id, time
    return math.inf


@AVAILABILITY_MODELS.register('always', AlwaysSettings)
def always(settings: AlwaysSettings, context: AvailabilityContext) -> AlwaysAvailable:
  """Every client is online at all times."""
  del settings, context
  return AlwaysAvailable()


def available_clients(availability: Availability, num_clients: int, time: float) -> np.ndarray:
  """Ids of the clients online at `time`."""
  if isinstance(availability, AlwaysAvailable):
    return np.arange(num_clients)
  return np.array(
    [c for c in range(num_clients) if availability.next_available(c, time) <= time], np.int64
  )


def positive_normal(
  rng: np.random.Generator, mean: npt.ArrayLike, std: npt.ArrayLike, max_tries: int = 1000
) -> np.ndarray:
  """Normal draws truncated to (0, inf) by redrawing non-positive values."""
  mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
  draw = rng.normal(mean, std)
  for _ in range(max_tries):
    bad = draw <= 0
    if not np.any(bad):
      return draw
    draw = np.where(bad, rng.normal(mean, std), draw)
  raise ValueError('latency draws stayed non-positive; std is far larger than mean')


def jittered(rng: np.random.Generator, value: float, jitter: float) -> float:
  """`value` with relative Gaussian noise N(value, (jitter * value)^2), truncated to positive
  values (no draw when `jitter` is 0). The per-task jitter of every latency model."""
  if not jitter:
    return float(value)
  # Scalar form of `positive_normal` (the same draws, without array overhead: this runs once
  # per dispatched task).
  std = jitter * value
  for _ in range(1000):
    draw = rng.normal(value, std)
    if draw > 0:
      return float(draw)
  raise ValueError('latency draws stayed non-positive; std is far larger than mean')
