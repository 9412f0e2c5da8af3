"""A run's output folder: checked before anything is written, locked while a run writes to it,
and never overwritten by accident.

A workdir holds one run. `check` refuses, before the run touches anything, a path that cannot
be a workdir and one that already holds a run's results (unless the caller resumes it or asked
to overwrite it); `WorkdirLock` keeps a second process from writing into a workdir in use. A run
takes the lock before its long start-up (the data load) and checks again under it, so a run that
finished in the meantime is never overwritten. Every JSON file is replaced atomically
(`fedsim_jax.metrics.write_json`); `run_status` says where a run stands.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Mapping
from typing import Any

from fedsim_jax.settings import ConfigError
from fedsim_jax.str_enum import StrEnum

# What a run writes; a workdir holding any of them holds results.
RESULT_FILES = (
  'config.json',
  'metrics.jsonl',
  'summary.json',
  'clients.json',
  'checkpoints',
  'models',
  'tasks.jsonl',
  'tensorboard',
  'mlflow_run.json',
)
LOCK_FILE = '.lock'


def holds_results(workdir: str | os.PathLike) -> bool:
  return any(os.path.lexists(os.path.join(workdir, name)) for name in RESULT_FILES)


def check(workdir: str | os.PathLike, *, resume: bool = False, overwrite: bool = False) -> str:
  """Returns the absolute workdir after checking that a run may write there; ConfigError (one
  line) otherwise. Nothing is created or changed."""
  if resume and overwrite:
    raise ConfigError('--resume and --overwrite exclude each other; allowed: one of them')
  if not isinstance(workdir, (str, os.PathLike)) or not str(workdir).strip():
    raise ConfigError(f'--workdir={workdir!r} is invalid; allowed values: a directory path')
  path = os.path.abspath(os.fspath(workdir))
  for part in path.split(os.sep):
    if len(part.encode()) > 255:
      raise ConfigError(f'--workdir={workdir}: a path component is longer than 255 bytes')
  if os.path.exists(path) and not os.path.isdir(path):
    raise ConfigError(f'--workdir={workdir} is a file; allowed values: a directory path')
  existing = path
  while not os.path.exists(existing):  # the nearest existing ancestor must be a writable dir
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ConfigError(f'--workdir={workdir} lies under the file {existing}; allowed: a directory')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ConfigError(f'--workdir={workdir} is not writable ({existing} denies it)')
  if holds_results(path) and not (resume or overwrite):
    raise ConfigError(
      f'--workdir={workdir} already holds a run; pass --resume to continue it, '
      '--overwrite to replace it, or choose another --workdir'
    )
  return path


def writable_directory_problem(directory: str) -> str | None:
  """Creates `directory` (and its parents) if needed; returns why files cannot be written in
  it ('cannot create it (<reason>)' or 'it is not writable'), or None when they can."""
  try:
    os.makedirs(directory, exist_ok=True)
  except OSError as error:
    return f'cannot create it ({error.strerror})'
  if not os.access(directory, os.W_OK | os.X_OK):
    return 'it is not writable'
  return None


def clear_results(workdir: str | os.PathLike) -> None:
  """Deletes a previous run's results from `workdir` (for `--overwrite`)."""
  for name in RESULT_FILES:
    path = os.path.join(workdir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    elif os.path.lexists(path):
      os.remove(path)


def in_use(workdir: str | os.PathLike) -> bool:
  """Whether a running process holds `workdir`'s lock (a `WorkdirLock`)."""
  path = os.path.join(workdir, LOCK_FILE)
  if not os.path.isfile(path):
    return False
  try:
    f = open(path, encoding='utf-8')  # noqa: SIM115 - closed below
  except OSError:  # a lock file this process may not read: no run can hold it either
    return False
  with f:
    try:
      fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
      if error.errno in (errno.EAGAIN, errno.EACCES):
        return True
      raise
    fcntl.flock(f, fcntl.LOCK_UN)
  return False


class RunStatus(StrEnum):
  """Where a run stands: the first five are the statuses its summary.json gives when it ended
  (`fedsim_jax.lifecycle.RunLifecycle.finish`), the last two those `run_status` adds for a run
  that has not. Each member equals its text ('completed' == RunStatus.COMPLETED)."""

  COMPLETED = 'completed'
  INTERRUPTED = 'interrupted'
  DIVERGED = 'diverged'
  FAILED = 'failed'
  # Stopped before an aggregation that would exceed `privacy.kwargs.epsilon_budget`: an end
  # like 'completed' (final evaluation, saved models), at the budget rather than the limit.
  BUDGET_EXHAUSTED = 'budget_exhausted'
  RUNNING = 'running'
  KILLED = 'killed'


ENDED_STATUSES = (
  RunStatus.COMPLETED,
  RunStatus.INTERRUPTED,
  RunStatus.DIVERGED,
  RunStatus.FAILED,
  RunStatus.BUDGET_EXHAUSTED,
)
# The ends that run to a stop condition: final evaluation, clients.json and saved models.
FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED)
RUNNING = RunStatus.RUNNING
KILLED = RunStatus.KILLED


def run_status(
  workdir: str | os.PathLike, summary: Mapping[str, Any] | None, last_version: int | None
) -> RunStatus:
  """Where the run in `workdir` stands, from its summary and the version of its last metrics row.

  'running' while a process holds the workdir; otherwise the status its summary.json gives when
  the run ended ('completed', 'interrupted', 'diverged', 'failed', 'budget_exhausted'), or 'killed' when it stopped
  without saying so: no summary.json, one that still says 'running', or a 'completed' one that
  metrics.jsonl has gone past (an extension by `--resume` that was killed). A summary without a
  status (written before summaries had one) is a completed run's.
  """
  if in_use(workdir):
    return RUNNING
  status = summary.get('status', RunStatus.COMPLETED) if isinstance(summary, Mapping) else None
  if status not in ENDED_STATUSES:
    return KILLED
  final_version = summary.get('final_version') if isinstance(summary, Mapping) else None
  if (
    status in FINISHED_STATUSES
    and isinstance(final_version, int)
    and isinstance(last_version, int)
    and last_version > final_version
  ):
    return KILLED
  return RunStatus(status)


class WorkdirLock:
  """An exclusive lock on a workdir for this process's run (released on `release` or exit).

  Raises ConfigError if another process holds it, or if `<workdir>/.lock` cannot be a lock file
  (a folder, say). The lock is an `flock` on `<workdir>/.lock`, which the kernel drops when the
  process dies, so a killed run never leaves a stale lock.
  """

  def __init__(self, workdir: str | os.PathLike) -> None:
    self.workdir = os.fspath(workdir)
    self.path = os.path.join(workdir, LOCK_FILE)
    self.created = not os.path.isdir(workdir)  # this lock made the workdir (see `abandon`)
    while True:
      self._file = self._open(workdir)
      try:
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as error:
        self._file.seek(0)
        holder = self._file.read().strip() or 'another process'
        self._file.close()
        if error.errno in (errno.EAGAIN, errno.EACCES):
          raise ConfigError(
            f'--workdir={workdir} is in use by a running run ({holder}); allowed: another '
            '--workdir, or wait for it to finish'
          ) from None
        raise
      # A run that gave up the workdir (`abandon`) may have removed the file this process
      # opened: then the lock is on a file no other run sees, and is taken again.
      if self._holds_the_lock_file():
        break
      self._file.close()
    self._file.seek(0)
    self._file.truncate()
    self._file.write(f'pid {os.getpid()}\n')
    self._file.flush()

  def _open(self, workdir: str | os.PathLike) -> Any:
    try:
      os.makedirs(workdir, exist_ok=True)
    except OSError as error:
      raise ConfigError(
        f'--workdir={workdir} cannot be created ({error.strerror}); allowed: a directory path'
      ) from None
    if os.path.lexists(self.path) and not os.path.isfile(self.path):
      raise ConfigError(
        f'--workdir={workdir}: {self.path} is not a lock file (a folder or other non-file); '
        'allowed: a workdir without it (remove it), or another --workdir'
      )
    try:
      return open(self.path, 'a+', encoding='utf-8')  # noqa: SIM115 - held until release
    except OSError as error:
      raise ConfigError(
        f'--workdir={workdir}: its lock file {self.path} cannot be opened ({error.strerror}); '
        'allowed: a workdir this user can write, or another --workdir'
      ) from None

  def _holds_the_lock_file(self) -> bool:
    try:
      return os.stat(self.path).st_ino == os.fstat(self._file.fileno()).st_ino
    except FileNotFoundError:
      return False

  def release(self) -> None:
    if not self._file.closed:
      fcntl.flock(self._file, fcntl.LOCK_UN)
      self._file.close()

  def abandon(self) -> None:
    """Releases the lock of a run that gave up before writing anything: a workdir this lock
    created, and that holds nothing but the lock file, is removed again."""
    if not self._file.closed and self.created:
      try:
        if os.listdir(self.workdir) == [LOCK_FILE]:
          os.remove(self.path)  # still locked: a run waiting on this file then retries
          os.rmdir(self.workdir)
      except OSError:  # another run began writing there meanwhile: leave it
        pass
    self.release()
