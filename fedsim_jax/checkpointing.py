"""Checkpoints of a whole object graph: a run's host state with its JAX arrays held by orbax.

A run's state is a graph of plain Python objects (the event queue, task handles, scheduler
bookkeeping, numpy random generators, metrics rows) whose leaves include JAX arrays (server
state, task start models, computed updates, per-client model tables). `save` pickles the graph
with every JAX array replaced by a reference, and hands the arrays to orbax as one pytree; `load`
reverses it. Shared arrays stay shared (each is written once), so the in-flight tasks that
downloaded the same server version cost one model copy.

Layout of `<directory>/<step>/` (an orbax `CheckpointManager` step, written to a temporary
folder and renamed when complete, so a crash mid-write leaves the previous checkpoint valid):

* `arrays/`: the JAX arrays, keyed by their position in the graph, and `host`, the pickled
  graph as a uint8 array.
* `meta/`: JSON: `format` (`FORMAT`), `fedsim_jax` (the writing version), `sha256` (of the
  pickled graph and every array's bytes, checked on load, so a damaged checkpoint is never
  resumed silently) and the caller's own fields (server version, virtual time, ...).

Pickles name classes by module path, so a checkpoint resumes with the fedsim_jax version that
wrote it (a mismatch is reported); like any pickle, load only checkpoints you wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.metadata
import io
import logging
import os
import pickle
import re
import shutil
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

FORMAT = 1
_HOST = 'host'


class CheckpointError(Exception):
  """No checkpoint could be read (every candidate was missing or damaged)."""


class WriteError(OSError):
  """A checkpoint or saved model could not be written (a full disk, a read-only folder, ...).

  Its message is one line naming the path and the cause; nothing half-written is left behind
  (`remove_unfinished`)."""

  def __init__(self, what: str, path: str, cause: str) -> None:
    super().__init__(f'cannot write {what} {path}: {cause}')
    self.path = path
    self.cause = cause


# orbax writes each checkpoint or model into `<name>` + this + a suffix, renamed when complete.
TEMPORARY_MARK = '.orbax-checkpoint-tmp'


def failure_cause(error: BaseException) -> str:
  """Why a write failed, in a few words: the OS error's text ('No space left on device',
  'Read-only file system') where there is one, from an OSError in the chain of causes or the
  error code that tensorstore's messages carry, else the error's first line."""
  seen: BaseException | None = error
  while seen is not None:
    if isinstance(seen, OSError) and seen.errno is not None:
      return seen.strerror or os.strerror(seen.errno)
    seen = seen.__cause__ or seen.__context__
  code = re.search(r"os_error_code='?(\d+)", str(error))
  if code is not None:
    return os.strerror(int(code.group(1)))
  text = str(error).splitlines()[0] if str(error) else type(error).__name__
  return text[:200]


def remove_unfinished(directory: str | os.PathLike) -> None:
  """Deletes what orbax left of writes into `directory` that never completed (a full disk, a
  process killed or stopped mid-write): its `*.orbax-checkpoint-tmp*` entries."""
  if not os.path.isdir(directory):
    return
  for name in os.listdir(directory):
    if TEMPORARY_MARK in name:
      path = os.path.join(directory, name)
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        with contextlib.suppress(OSError):
          os.remove(path)


@dataclasses.dataclass(frozen=True)
class Restored:
  """A loaded checkpoint: the object graph `save` was given and its `meta` fields."""

  state: Any
  meta: dict[str, Any]
  step: int


def _is_typed_key(array: jax.Array) -> bool:
  return jnp.issubdtype(array.dtype, jax.dtypes.prng_key)


class _ArrayPickler(pickle.Pickler):
  """Pickles a graph with each JAX array replaced by a key into `self.arrays`."""

  def __init__(self, file: io.BytesIO) -> None:
    super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
    self.arrays: dict[str, np.ndarray] = {}
    self._keys: dict[int, str] = {}
    self._alive: list[Any] = []  # keeps ids unique while pickling

  def persistent_id(self, obj: Any) -> Any:
    if not isinstance(obj, jax.Array):
      return None
    key = self._keys.get(id(obj))
    if key is None:
      key = f'{len(self._keys):06d}'
      self._keys[id(obj)] = key
      self._alive.append(obj)
      if _is_typed_key(obj):  # orbax stores plain arrays: keep the key's impl with it
        self.arrays[key] = np.asarray(jax.random.key_data(obj))
        return ('key', key, str(jax.random.key_impl(obj)))
      self.arrays[key] = np.asarray(obj)
    return ('array', key, None)


# Modules whose classes moved (each paper's code into `fedsim_jax.algorithms`): a checkpoint
# written before names the old module, and each class is looked up in the new ones, in order.
_MOVED_MODULES: dict[str, tuple[str, ...]] = {
  'fedsim_jax.strategy.asofed': ('fedsim_jax.algorithms.asofed',),
  'fedsim_jax.strategy.budgets': ('fedsim_jax.algorithms.ccfedavg.budgets',),
  'fedsim_jax.strategy.ccfedavg': ('fedsim_jax.algorithms.ccfedavg.scheduler',),
  'fedsim_jax.strategy.fare_dust': ('fedsim_jax.algorithms.stragglers.fare_dust',),
  'fedsim_jax.strategy.feast_msg': ('fedsim_jax.algorithms.stragglers.feast_msg',),
  'fedsim_jax.strategy.fedasmu': (
    'fedsim_jax.algorithms.fedasmu.server',
    'fedsim_jax.algorithms.fedasmu.device',
    'fedsim_jax.algorithms.fedasmu.scheduler',
  ),
  'fedsim_jax.strategy.fedasmu_fetch': ('fedsim_jax.algorithms.fedasmu.fetch',),
  'fedsim_jax.strategy.fedasync': ('fedsim_jax.algorithms.fedasync',),
  'fedsim_jax.strategy.fedat': ('fedsim_jax.algorithms.fedat',),
  'fedsim_jax.strategy.fedcompass': ('fedsim_jax.algorithms.fedcompass',),
  'fedsim_jax.strategy.feddyn': ('fedsim_jax.algorithms.feddyn',),
  'fedsim_jax.strategy.fedopt': ('fedsim_jax.strategy.server_step',),
  'fedsim_jax.strategy.fedsa': ('fedsim_jax.algorithms.fedsa',),
  'fedsim_jax.strategy.moon': ('fedsim_jax.algorithms.moon',),
  'fedsim_jax.strategy.port': ('fedsim_jax.algorithms.port',),
  'fedsim_jax.algorithms.fare_dust': ('fedsim_jax.algorithms.stragglers.fare_dust',),
  'fedsim_jax.algorithms.feast_msg': ('fedsim_jax.algorithms.stragglers.feast_msg',),
  'fedsim_jax.algorithms.ccfedavg': ('fedsim_jax.algorithms.ccfedavg.algorithm',),
}


class _ArrayUnpickler(pickle.Unpickler):
  def __init__(self, file: io.BytesIO, arrays: Mapping[str, np.ndarray]) -> None:
    super().__init__(file)
    self._arrays = arrays
    self._loaded: dict[str, jax.Array] = {}

  def find_class(self, module: str, name: str) -> Any:
    for moved_to in _MOVED_MODULES.get(module, ()):
      candidate = importlib.import_module(moved_to)
      if hasattr(candidate, name):
        return getattr(candidate, name)
    return super().find_class(module, name)

  def persistent_load(self, pid: Any) -> Any:
    kind, key, impl = pid
    if key not in self._loaded:
      data = np.asarray(self._arrays[key])
      self._loaded[key] = (
        jax.random.wrap_key_data(jnp.asarray(data), impl=impl)
        if kind == 'key'
        else jnp.asarray(data)
      )
    return self._loaded[key]


def _digest(host: bytes, arrays: Mapping[str, np.ndarray]) -> str:
  digest = hashlib.sha256(host)
  for key in sorted(arrays):
    array = np.ascontiguousarray(arrays[key])
    digest.update(f'{key}{array.dtype}{array.shape}'.encode())
    digest.update(array.tobytes())
  return digest.hexdigest()


def this_process_only() -> Any:
  """orbax options under which this process reads and writes alone: in a multi-process run
  (`fedsim_jax.distributed`) only process 0 writes, from host copies of the arrays, and no
  other process takes part in (or waits at) orbax's cross-process barriers."""
  import orbax.checkpoint as ocp

  index = jax.process_index()
  return ocp.options.MultiprocessingOptions(primary_host=index, active_processes={index})


# Held by `quiet_orbax`: the runs of a lockstep sweep checkpoint from their own threads, and
# the logger level it sets is the whole process's.
_ORBAX_LOCK = threading.RLock()


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
  """Hides orbax's lines (several INFO lines per save, and a traceback per thread when a write
  fails, through absl's logger) inside the block, so that a run's log stays its progress lines:
  the callers report failures themselves, in one line. One thread at a time runs such a block."""
  with _ORBAX_LOCK:
    logger = logging.getLogger('absl')
    level = logger.level
    logger.setLevel(max(level, logging.CRITICAL))
    try:
      yield
    finally:
      logger.setLevel(level)


def _package_version() -> str:
  try:
    return importlib.metadata.version('fedsim_jax')
  except importlib.metadata.PackageNotFoundError:  # imported from a source tree
    return 'unknown'


class Checkpoints:
  """The checkpoints of one run, in `directory`, keeping the newest `keep`.

  Args:
    directory: created on the first save.
    keep: how many checkpoints to keep (older ones are deleted after a save).
  """

  def __init__(self, directory: str | os.PathLike, keep: int = 2) -> None:
    if keep < 1:
      raise ValueError(f'keep={keep}; allowed: >= 1')
    self.directory = os.path.abspath(directory)
    self.keep = keep
    self._manager: Any = None
    self._saved = False  # whether this object has saved yet (see `save`)

  def _orbax(self) -> Any:
    if self._manager is None:
      import orbax.checkpoint as ocp  # imported on first use: it is slow to import

      self._ocp = ocp
      os.makedirs(self.directory, exist_ok=True)  # orbax's `create` excludes active_processes
      self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
          max_to_keep=self.keep,
          enable_async_checkpointing=False,
          create=False,
          multiprocessing_options=this_process_only(),
        ),
      )
    return self._manager

  def steps(self) -> list[int]:
    """Steps of the complete checkpoints on disk, oldest first."""
    if not os.path.isdir(self.directory):
      return []
    return sorted(int(name) for name in os.listdir(self.directory) if name.isdigit())

  def save(self, state: Any, meta: Mapping[str, Any]) -> int:
    """Writes `state` (any picklable graph; JAX arrays go to orbax) with the JSON `meta`;
    returns the new checkpoint's step.

    Raises:
      WriteError: the checkpoint could not be written; what was written of it is removed, and
        the earlier checkpoints are as they were.
    """
    buffer = io.BytesIO()
    pickler = _ArrayPickler(buffer)
    pickler.dump(state)
    host = buffer.getvalue()
    arrays = dict(pickler.arrays)
    full_meta = {
      **meta,
      'format': FORMAT,
      'fedsim_jax': _package_version(),
      'sha256': _digest(host, arrays),
    }
    arrays[_HOST] = np.frombuffer(host, np.uint8)
    if not self._saved:  # a killed writer's leftovers would otherwise stay for good
      remove_unfinished(self.directory)
    steps = self.steps()
    step = steps[-1] + 1 if steps else 0
    try:
      with quiet_orbax():
        manager = self._orbax()
        ocp = self._ocp
        manager.save(
          step,
          args=ocp.args.Composite(
            arrays=ocp.args.PyTreeSave(arrays), meta=ocp.args.JsonSave(full_meta)
          ),
        )
        manager.wait_until_finished()
    except BaseException as error:
      self._manager = None  # its idea of the steps on disk may be stale now
      remove_unfinished(self.directory)
      if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
        raise
      raise WriteError(
        'the checkpoint', os.path.join(self.directory, str(step)), failure_cause(error)
      ) from error
    self._saved = True
    return step

  def _load_step(self, step: int) -> Restored:
    with quiet_orbax():
      manager = self._orbax()
      ocp = self._ocp
      restored = manager.restore(
        step,
        args=ocp.args.Composite(arrays=ocp.args.PyTreeRestore(), meta=ocp.args.JsonRestore()),
      )
    meta = dict(restored['meta'])
    arrays = {key: np.asarray(value) for key, value in restored['arrays'].items()}
    host = arrays.pop(_HOST).tobytes()
    if meta.get('format') != FORMAT:
      raise CheckpointError(f'format {meta.get("format")!r}; this fedsim_jax reads {FORMAT}')
    if _digest(host, arrays) != meta.get('sha256'):
      raise CheckpointError('its contents do not match their recorded sha256')
    state = _ArrayUnpickler(io.BytesIO(host), arrays).load()
    return Restored(state=state, meta=meta, step=step)

  def load_latest(self) -> Restored | None:
    """The newest checkpoint that reads back intact (None if there is none at all).

    A damaged newest checkpoint is skipped with a one-line warning naming it, and the one
    before it is used; CheckpointError if every checkpoint is damaged.
    """
    steps = self.steps()
    failures = []
    for step in reversed(steps):
      try:
        restored = self._load_step(step)
      except Exception as error:  # noqa: BLE001 - any damage means: try the previous one
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        failures.append(f'{step}: {reason}')
        logging.warning(
          'checkpoint %s is damaged (%s); falling back to an earlier one',
          os.path.join(self.directory, str(step)),
          reason[:200],
        )
        continue
      if restored.meta['fedsim_jax'] != _package_version():
        logging.warning(
          'checkpoint %d was written by fedsim_jax %s; this is %s',
          step,
          restored.meta['fedsim_jax'],
          _package_version(),
        )
      return restored
    if failures:
      raise CheckpointError(
        f'no readable checkpoint in {self.directory} ({"; ".join(failures)[:300]})'
      )
    return None

  def remove_all(self) -> None:
    """Deletes every checkpoint (a run restarted from the beginning)."""
    self._manager = None
    shutil.rmtree(self.directory, ignore_errors=True)
