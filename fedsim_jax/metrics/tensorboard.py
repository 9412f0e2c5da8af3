"""TensorBoard scalars of a run's metrics rows, in `<workdir>/tensorboard/` (a `RunWriter`).

Written with tensorboardX: a small pure-Python writer (numpy and protobuf, both already here)
that needs neither TensorFlow (flax's and clu's summary writers do) nor PyTorch. Every numeric
field of a metrics row is written twice:

- as `<name>` stepped by the server version (`virtual_time` included);
- as `by_virtual_time/<name>` stepped by the virtual time in integer milliseconds
  (`version` included, `virtual_time` itself left out), so that TensorBoard's step axis plots any
  metric against simulated time. TensorBoard steps are integers; milliseconds keep runs of
  seconds apart, and two evaluations less than 1 ms of virtual time apart share a step.

View with `tensorboard --logdir <workdir>/tensorboard`.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fedsim_jax.metrics.run_writer import RunInfo, RunWriter, numeric_fields

SUBDIR = 'tensorboard'
BY_VIRTUAL_TIME = 'by_virtual_time/'  # the prefix of the scalars stepped by virtual time


def tensorboard_available() -> bool:
  """Whether the writer's package (tensorboardX) is installed."""
  return importlib.util.find_spec('tensorboardX') is not None


def virtual_time_step(virtual_time: float) -> int:
  """The TensorBoard step of a virtual time in seconds: integer milliseconds."""
  return round(virtual_time * 1000)


class TensorBoardWriter(RunWriter):
  """Writes metrics rows as TensorBoard scalars, stepped by `row['version']` and, under
  `by_virtual_time/`, by `row['virtual_time']` in milliseconds.

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
      self.write_metrics(row)

  @classmethod
  def for_run(cls, run: RunInfo) -> TensorBoardWriter:
    """The writer of the run `run` describes (a `WriterFactory`)."""
    return cls(run.workdir, rows=run.rows)

  def write_metrics(self, row: Mapping[str, Any]) -> None:
    scalars = numeric_fields(row)
    version = int(row['version'])
    for name, value in scalars.items():
      if name != 'version':
        self._writer.add_scalar(name, value, global_step=version)
    if row.get('virtual_time') is None:  # (never None in practice: the clock is finite)
      return
    step = virtual_time_step(row['virtual_time'])
    for name, value in scalars.items():
      if name != 'virtual_time':
        self._writer.add_scalar(BY_VIRTUAL_TIME + name, value, global_step=step)

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()
