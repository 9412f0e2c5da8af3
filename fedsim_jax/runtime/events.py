"""A deterministic priority queue of events over virtual time."""

from __future__ import annotations

import enum
import heapq
from typing import Any, NamedTuple


class EventKind(enum.Enum):
  ARRIVAL = 'arrival'  # a client's update reaches the server
  DROPOUT = 'dropout'  # a client goes offline before finishing its task
  TIMER = 'timer'  # a scheduler-set alarm (deadline, group timer, periodic trigger)


class Event(NamedTuple):  # a tuple: built once per event, on the hot path
  time: float
  kind: EventKind
  payload: Any


# Added to a timer's insertion number: at one instant, every arrival and dropout pops before any
# timer (a client arriving exactly at a deadline or a group's latest arrival time T_max is on
# time: FedCompass's Algorithm 1 tests T_now <= T_max).
_TIMER_RANK = 1 << 62


class EventQueue:
  """Min-heap on (virtual time, arrivals and dropouts before timers, insertion order):
  simultaneous events pop in a fixed order, so a run never depends on how Python compares
  payloads."""

  def __init__(self) -> None:
    self._heap: list[tuple[float, int, Event]] = []
    self._counter = 0

  def push(self, time: float, kind: EventKind, payload: Any = None) -> Event:
    event = Event(float(time), kind, payload)
    order = self._counter + _TIMER_RANK if kind is EventKind.TIMER else self._counter
    heapq.heappush(self._heap, (event.time, order, event))
    self._counter += 1
    return event

  def pop(self) -> Event:
    return heapq.heappop(self._heap)[2]

  def peek_time(self) -> float:
    return self._heap[0][0]

  def __len__(self) -> int:
    return len(self._heap)
