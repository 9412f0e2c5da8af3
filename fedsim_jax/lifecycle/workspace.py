"""The workdir a run writes into, claimed before the run's long start-up (the data load)."""

from __future__ import annotations

import dataclasses
import os
import tempfile

import jax

from fedsim_jax import distributed
from fedsim_jax import workdir as workdir_lib


@dataclasses.dataclass(frozen=True)
class Workspace:
  """A checked and locked workdir.

  In a multi-process run only process 0 (`primary`) writes the workdir; the others write their
  own outputs into a scratch folder (`path`), deleted at the end, and read the workdir's
  checkpoints (`checkpoint_dir`).
  """

  path: str
  primary: bool
  checkpoint_dir: str
  lock: workdir_lib.WorkdirLock

  @classmethod
  def claim(
    cls,
    workdir: str | os.PathLike,
    *,
    resume: bool,
    overwrite: bool,
    distributed_run: bool,
  ) -> Workspace:
    """Checks `workdir` (`fedsim_jax.workdir.check`), takes its lock and checks it again under
    the lock: a run may have ended there since the first check. Raises `ConfigError`; a failed
    check under the lock gives the lock up again (`WorkdirLock.abandon`)."""
    primary = not distributed_run or distributed.is_primary()
    checkpoint_dir = os.path.join(os.path.abspath(workdir), 'checkpoints')
    if primary:
      path = workdir_lib.check(workdir, resume=resume, overwrite=overwrite)
    else:
      path = tempfile.mkdtemp(prefix=f'fedsim-process{jax.process_index()}-')
    lock = workdir_lib.WorkdirLock(path)
    try:
      if primary:
        workdir_lib.check(path, resume=resume, overwrite=overwrite)
    except BaseException:
      lock.abandon()
      raise
    return cls(path=path, primary=primary, checkpoint_dir=checkpoint_dir, lock=lock)
