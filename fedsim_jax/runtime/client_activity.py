"""Which clients are training, and which are online and idle: what schedulers draw from."""

from __future__ import annotations

import math

import numpy as np
from sortedcontainers import SortedList

from fedsim_jax.runtime.latency import AlwaysAvailable, Availability, available_clients
from fedsim_jax.runtime.sampling import choose_one


class ClientActivity:
  """Tasks in flight per client, and the clients' availability.

  Attributes:
    availability: when clients are online.
    busy: `[num_clients]` tasks in flight per client.
    not_busy: the clients with no task in flight, ascending, kept as tasks start and end:
      asynchronous refills draw one of them per arrival, and scanning `busy` for it was a hot
      path. A sorted list of sublists: removing or adding a client costs O(log n), so
      dispatching a round of n clients is not quadratic in n (a plain list's deletions were).
    always_available: every client is always online (`AlwaysAvailable`).
  """

  def __init__(self, availability: Availability, num_clients: int) -> None:
    self.availability = availability
    self.busy = np.zeros(num_clients, np.int64)
    self.not_busy = SortedList(range(num_clients))
    self.always_available = isinstance(availability, AlwaysAvailable)

  @property
  def num_clients(self) -> int:
    return len(self.busy)

  def is_offline(self, client_id: int, now: float) -> bool:
    return not self.always_available and self.availability.next_available(client_id, now) > now

  def online_until(self, client_id: int, now: float) -> float:
    """When the client, online at `now`, goes offline (inf if never)."""
    return math.inf if self.always_available else self.availability.online_until(client_id, now)

  def start_task(self, client_id: int) -> None:
    if self.busy[client_id] == 0:
      self.not_busy.remove(client_id)
    self.busy[client_id] += 1

  def finish_task(self, client_id: int) -> None:
    self.busy[client_id] -= 1
    if self.busy[client_id] == 0:
      self.not_busy.add(client_id)

  def is_busy(self, client_id: int) -> bool:
    return self.busy[client_id] > 0

  def idle_clients(self, now: float) -> np.ndarray:
    """Ids of the clients online at `now` and not training, ascending."""
    if self.always_available:
      return (self.busy == 0).nonzero()[0]  # np.flatnonzero without its wrappers (hot path)
    online = np.zeros(self.num_clients, bool)
    online[available_clients(self.availability, self.num_clients, now)] = True
    return np.flatnonzero((self.busy == 0) & online)

  def draw_idle_client(self, rng: np.random.Generator, now: float) -> int | None:
    """One client drawn uniformly from `idle_clients(now)` (None if there is none), with
    exactly the draw of `choose_without_replacement(rng, idle_clients(now), 1)`, without
    building the array when every client is always online (the asynchronous refill's hot
    path)."""
    idle = self.not_busy if self.always_available else self.idle_clients(now)
    return choose_one(rng, idle) if len(idle) else None

  def next_availability_time(self, now: float) -> float:
    """Earliest time > `now` at which some offline client comes online (inf if none)."""
    times = [self.availability.next_available(c, now) for c in range(self.num_clients)]
    later = [t for t in times if t > now]
    return min(later, default=math.inf)
