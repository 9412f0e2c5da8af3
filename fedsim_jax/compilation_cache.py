"""Reuse of compiled XLA programs across the runs of one process (or across processes).

Every run builds its client update, aggregator and evaluator afresh: they close over the run's
model, optimizer and settings, so `jax.jit` sees new functions and compiles them again even when
an earlier run in the process compiled the very same programs. For a small model that is about
1-2 s of XLA compilation per run, much of a short run's time, paid by every seed of a sweep,
every run of a reproduction binary and every test.

JAX's persistent compilation cache fixes this at the right level: it is keyed by the compiled
program itself (its HLO, the compile options, the backend and the JAX version), so a run reuses
any identical program compiled before, whichever Python function produced it, and can never
get a program other than the one it would have compiled. Results are unchanged.

Settings (`run.compilation_cache`):
  'process'  (default) a private temporary directory (mode 0700), removed when the process
             exits: runs in the process share programs, nothing persists.
  'off'      no cache (JAX's own default).
  a path     that directory, kept across processes: repeated binary invocations and test runs
             skip compilation too. Only point it at a directory no one else can write to (JAX
             executes what it loads from there), and do not share it between machines with
             different CPUs.

A cache configured directly through JAX (`JAX_COMPILATION_CACHE_DIR`, or
`jax.config.update('jax_compilation_cache_dir', ...)` before the first run) is left as it is.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from fedsim_jax.str_enum import StrEnum
from fedsim_jax.workdir import writable_directory_problem


class CacheSetting(StrEnum):
  """The named values of `run.compilation_cache` (any other value is a directory path)."""

  PROCESS = 'process'  # a temporary directory shared by the runs of this process
  OFF = 'off'  # no persistent cache


MODES = ('process', 'off')

_lock = threading.Lock()
_managed: str | None = None  # the directory this module configured, if any
_process_dir: str | None = None  # the 'process' directory, created on first use
_saved_min_compile_time: float | None = None


def in_use(directory: str | None) -> str:
  """How `enable`'s result reads in a run summary: 'off', 'process' or the directory."""
  if directory is None:
    return 'off'
  return 'process' if directory == _process_dir else directory


def _remove(path: str) -> None:
  shutil.rmtree(path, ignore_errors=True)


def _configure(directory: str | None) -> None:
  """Points JAX's cache at `directory` (None: off) and makes it take effect now."""
  global _managed, _saved_min_compile_time
  if directory is not None and _managed is None:
    # Every program counts: ours compile in 0.05-1.5 s, under JAX's 1 s default threshold.
    # (jax.config's options are attributes it creates at run time, unknown to type checkers.)
    saved = jax.config.jax_persistent_cache_min_compile_time_secs  # type: ignore[attr-defined]
    _saved_min_compile_time = saved
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  if directory is None and _saved_min_compile_time is not None:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', _saved_min_compile_time)
    _saved_min_compile_time = None
  jax.config.update('jax_compilation_cache_dir', directory)
  # JAX decides whether the cache is in use at its first compilation; start over so the new
  # directory (or none) applies from the next compilation on. (Quietly: JAX logs the reset
  # at INFO, which binaries would print.)
  jax_logger = logging.getLogger('jax._src.compilation_cache')
  level = jax_logger.level
  jax_logger.setLevel(logging.WARNING)
  try:
    jax_cache.reset_cache()
  finally:
    jax_logger.setLevel(level)
  _managed = directory


def enable(setting: str) -> str | None:
  """Applies `run.compilation_cache` (see the module docstring) to this process.

  Returns the directory in use, or None when no cache is used. Raises `ValueError` when a
  directory cannot be created or written. Idempotent; a later call with another setting
  replaces the earlier one. Process-wide: it applies to all JAX compilation in the process.
  """
  global _process_dir
  with _lock:
    current = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # see _configure
    if current and current != _managed:
      return current  # configured through JAX by the user: theirs to manage
    if setting == CacheSetting.OFF:
      if _managed is not None:
        _configure(None)
      return None
    if setting == CacheSetting.PROCESS:
      if _process_dir is None:
        _process_dir = tempfile.mkdtemp(prefix='fedsim-xla-')
        atexit.register(_remove, _process_dir)
      directory = _process_dir
    else:
      directory = os.path.abspath(os.path.expanduser(setting))
      problem = writable_directory_problem(directory)
      if problem is not None:
        raise ValueError(
          f'run.compilation_cache={setting!r}: {problem}; allowed: {MODES} or a writable directory'
        )
    if directory != _managed:
      _configure(directory)
    return directory
