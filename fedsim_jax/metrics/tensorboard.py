"""TensorBoard scalars of a run's metrics rows, in `<workdir>/tensorboard/`.

Written with tensorboardX: a small pure-Python writer (numpy and protobuf, both already here)
that needs neither TensorFlow (flax's and clu's summary writers do) nor PyTorch. Every numeric
field of a metrics row becomes a scalar stepped by the server version, virtual time included
(`virtual_time`), so TensorBoard plots any metric against versions and, through the
`virtual_time` scalar, relates them to simulated time. View with
`tensorboard --logdir <workdir>/tensorboard`.
"""

from __future__ import annotations

import glob
import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

SUBDIR = 'tensorboard'


def tensorboard_available() -> bool:
  """Whether the writer's package (tensorboardX) is installed."""
  return importlib.util.find_spec('tensorboardX') is not None


def _scalars(row: Mapping[str, Any]) -> dict[str, float]:
  return {
    name: float(value)
    for name, value in row.items()
    if name != 'version'
    and isinstance(value, int | float)
    and not isinstance(value, bool)
    and math.isfinite(value)
  }


class TensorBoardWriter:
  """Writes metrics rows as TensorBoard scalars, stepped by `row['version']`.

  Args:
    workdir: the run's folder; the event files go to `<workdir>/tensorboard/`.
    rows: the rows a resumed run had written up to its checkpoint: earlier event files are
      removed and these rows written first, so the log holds each version once.
  """

  def __init__(self, workdir: str | os.PathLike, rows: Sequence[Mapping[str, Any]] = ()) -> None:
    from tensorboardX import SummaryWriter

    self.logdir = os.path.join(workdir, SUBDIR)
    for stale in glob.glob(os.path.join(self.logdir, 'events.out.tfevents.*')):
      os.remove(stale)
    self._writer = SummaryWriter(logdir=self.logdir, flush_secs=30)
    for row in rows:
      self.write(row)

  def write(self, row: Mapping[str, Any]) -> None:
    step = int(row['version'])
    for name, value in _scalars(row).items():
      self._writer.add_scalar(name, value, global_step=step)

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()
