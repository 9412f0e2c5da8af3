"""How client tasks run by default: the backend and step-loop rule.

`executor.backend='auto'` and `executor.step_loop='auto'` (the defaults) resolve here, per model
and platform, by a rule measured with the benchmark harness (`make bench`,
docs/results/performance.md):

- On accelerators (GPU, TPU) and whenever the task axis is sharded over several devices: vmap
  over tasks, steps in `lax.scan`. One program trains the whole batch; this is what the
  accelerator is for, and the only backend that shards.
- On XLA:CPU: the loop backend (one jitted program per task, called in a Python loop). On the
  2-core CPU it beat vmap in every measured case: sync FedAvg MLP 213k against 83k client
  examples/s, FedCompass silos 211k against 18.6k (vmap pads every task to the batch's
  longest), FedBuff 212k against 92k, the MNIST CNN 8.3k against 238 (vmap over clients with
  distinct weights becomes a grouped convolution, slow on CPU; `make bench` of 26 November
  2026), time-limited FedAvg 17.5k against 16.0k.
- Steps of a model with convolutions on XLA:CPU are driven from the host, one jitted step at a
  time (`step_loop='host'`): a convolutional step inside `lax.scan` ran about 20x slower (406
  against 8,252 examples/s for the MNIST CNN, `make bench` of 26 November 2026). Other models
  scan.

- On XLA:CPU, fedsim's programs leave convolutions to XLA's own (Eigen) kernels instead of the
  YNNPACK library that recent jaxlibs route them to (`compiler_options`): the MNIST CNN's SGD
  step ran 1.3x faster (8.2k against 6.5k examples/s, two tasks at once; `benchmarks/
  cnn_step.py`). Matrix products and reductions stay with the library.

- The loop backend runs one task per CPU core at once (`executor.threads=0`, the default),
  each from its own host thread: XLA:CPU gives a small client step little of a second core (a
  B = 32 MLP step runs 1.3x faster on two cores than on one, a B = 1,024 step 1.9x), so two
  tasks at once trained the sync MLP case 1.5x faster and the CNN's host-driven steps 1.3x.

Explicit settings are never overridden; `resolve_execution` and `resolve_threads` only fill in
'auto' and 0.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from fedsim_jax.str_enum import StrEnum, parse


class Backend(StrEnum):
  """How the executor runs a batch of tasks (`executor.backend`)."""

  VMAP = 'vmap'  # one program over all tasks
  LOOP = 'loop'  # a Python loop over tasks, one jitted program per task


class StepLoop(StrEnum):
  """How a task's local steps are driven (`executor.step_loop`)."""

  SCAN = 'scan'  # inside the task's program (`lax.scan` / a while loop)
  HOST = 'host'  # one jitted step at a time from the host (loop backend only)


AUTO = 'auto'  # the setting that `resolve_execution` fills in
BACKEND_SETTINGS = (AUTO, *(backend.value for backend in Backend))
STEP_LOOP_SETTINGS = (AUTO, *(step_loop.value for step_loop in StepLoop))
ACCELERATOR_PLATFORMS = ('gpu', 'tpu', 'cuda', 'rocm')


def has_convolution(apply: Callable[..., Any], *example_args: Any) -> bool:
  """Whether `apply(*example_args)` traces to a convolution (inspects the jaxpr; no compute)."""
  jaxpr = jax.make_jaxpr(apply)(*example_args)

  def walk(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
      if eqn.primitive is jax.lax.conv_general_dilated_p:
        return True
      for value in eqn.params.values():
        inner = getattr(value, 'jaxpr', None)
        if inner is not None and walk(getattr(inner, 'jaxpr', inner)):
          return True
    return False

  return walk(jaxpr.jaxpr)


def model_has_convolution(model: Any, params: Any) -> bool:
  """Whether a `models.Model` bundle's forward pass has a convolution."""
  dummy = jax.numpy.zeros((1, *model.input_shape), model.input_dtype)
  return has_convolution(model.apply, params, dummy)


def resolve_execution(
  backend: str,
  step_loop: str,
  *,
  platform: str | None = None,
  devices: int = 1,
  convolutional: Callable[[], bool] = lambda: False,
) -> tuple[Backend, StepLoop]:
  """The concrete (backend, step_loop) for settings that may be 'auto', parsed.

  Args:
    backend: 'auto', 'vmap' or 'loop'.
    step_loop: 'auto', 'scan' or 'host'.
    platform: JAX platform name (default: the default backend's).
    devices: devices the task axis is sharded over (> 1 needs vmap).
    convolutional: called (at most once) to ask whether the model has convolutions.
  """
  if backend not in BACKEND_SETTINGS:
    raise ValueError(f'executor.backend={backend!r}; allowed: {BACKEND_SETTINGS}')
  if step_loop not in STEP_LOOP_SETTINGS:
    raise ValueError(f'executor.step_loop={step_loop!r}; allowed: {STEP_LOOP_SETTINGS}')
  chosen_backend = None if backend == AUTO else Backend(backend)
  chosen_step_loop = None if step_loop == AUTO else StepLoop(step_loop)
  platform = platform or jax.default_backend()
  on_cpu = platform not in ACCELERATOR_PLATFORMS
  if chosen_backend is None:  # host-driven steps exist only in the loop backend
    host_steps = chosen_step_loop is StepLoop.HOST
    chosen_backend = Backend.LOOP if (on_cpu or host_steps) and devices == 1 else Backend.VMAP
  if chosen_step_loop is None:
    host_steps = chosen_backend is Backend.LOOP and on_cpu and convolutional()
    chosen_step_loop = StepLoop.HOST if host_steps else StepLoop.SCAN
  return chosen_backend, chosen_step_loop


# The XLA:CPU library (YNNPACK) fusions fedsim keeps: every default one but convolutions.
_CPU_OPTIONS = {
  'xla_cpu_experimental_ynn_fusion_type': (
    'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE'
  )
}


@functools.cache
def _cpu_options_supported() -> bool:
  """Whether the installed jaxlib compiles with `_CPU_OPTIONS` (probed once per process)."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=_CPU_OPTIONS).lower(np.float32(0)).compile()
  except Exception:  # an older or newer jaxlib: the option or its values are not there
    return False
  return True


def compiler_options(platform: str | None = None) -> dict[str, str]:
  """XLA options for fedsim's client and evaluation programs on `platform` (default: the
  default backend's): on XLA:CPU, convolutions through XLA's own kernels rather than YNNPACK;
  nothing elsewhere, and nothing where the installed jaxlib does not know the option."""
  platform = platform or jax.default_backend()
  if platform in ACCELERATOR_PLATFORMS or not _cpu_options_supported():
    return {}
  return dict(_CPU_OPTIONS)


def jit(fun: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
  """`jax.jit` with the platform's `compiler_options`."""
  options = compiler_options()
  return jax.jit(fun, compiler_options=options, **kwargs) if options else jax.jit(fun, **kwargs)


def cpu_cores() -> int:
  """CPU cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def resolve_threads(threads: int, backend: str, *, platform: str | None = None) -> int:
  """The loop backend's tasks at once for `executor.threads` (0: one per CPU core on XLA:CPU,
  1 on accelerators and for the vmap backend, which runs a batch as one program)."""
  if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
    raise ValueError(f'executor.threads={threads!r}; allowed: 0 (auto) or an integer >= 1')
  if threads:
    return threads
  loop = parse(Backend, backend, 'executor.backend') is Backend.LOOP
  platform = platform or jax.default_backend()
  return cpu_cores() if loop and platform not in ACCELERATOR_PLATFORMS else 1


HELD_UPDATES_BYTES = 1 << 30  # what `executor.max_batch_tasks=0` lets one batch's updates take
MAX_BATCH_TASKS_RANGE = (16, 4096)


def resolve_max_batch_tasks(max_batch_tasks: int, model_bytes: int) -> int:
  """The most tasks computed at once for `executor.max_batch_tasks` (0: as many updates as fit
  in 1 GiB, within 16..4096: 1,347 tasks of the 784-200-200-10 MLP, 4096 of LeNet-5).
  It bounds the client updates a run holds, hence its memory, whatever its cohort or
  concurrency (`Simulation(max_batch_tasks=...)`)."""
  if (
    isinstance(max_batch_tasks, bool) or not isinstance(max_batch_tasks, int) or max_batch_tasks < 0
  ):
    raise ValueError(f'executor.max_batch_tasks={max_batch_tasks!r}; allowed: 0 (auto) or >= 1')
  if max_batch_tasks:
    return max_batch_tasks
  low, high = MAX_BATCH_TASKS_RANGE
  return int(min(high, max(low, HELD_UPDATES_BYTES // max(model_bytes, 1))))
