"""SIGINT and SIGTERM as requests to stop cleanly: the run finishes its current event, writes a
checkpoint and an `interrupted` summary, and the binary exits 128 + the signal number."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupt:
  """The first SIGINT/SIGTERM received while installed (`signal` is None until then)."""

  def __init__(self, on_signal: Callable[[], None]) -> None:
    self.signal: int | None = None
    self._on_signal = on_signal

  def _handle(self, signum: int, frame: FrameType | None) -> None:
    del frame
    self.signal = signum
    # A second signal of either kind stops at once, as it would without this handler.
    for number in SIGNALS:
      signal.signal(
        number, signal.SIG_DFL if number == signal.SIGTERM else signal.default_int_handler
      )
    self._on_signal()

  @property
  def exit_code(self) -> int:
    """The shell's code for a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (self.signal or 0)


@contextlib.contextmanager
def stop_requests(on_signal: Callable[[], None]) -> Iterator[Interrupt]:
  """Within the block, SIGINT and SIGTERM call `on_signal()` (once) and are recorded in the
  yielded `Interrupt` instead of ending the process. Outside the main thread, where Python
  cannot install handlers, signals keep their usual effect."""
  interrupt = Interrupt(on_signal)
  if threading.current_thread() is not threading.main_thread():
    yield interrupt
    return
  previous = {number: signal.getsignal(number) for number in SIGNALS}
  for number in SIGNALS:
    signal.signal(number, interrupt._handle)
  try:
    yield interrupt
  finally:
    for number, handler in previous.items():
      signal.signal(number, handler)
