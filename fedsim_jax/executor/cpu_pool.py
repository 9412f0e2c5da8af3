"""XLA:CPU's thread pool, sized for programs sharded over several devices of one process.

XLA:CPU runs a program sharded over D devices of a process on its client thread pool: the
launching host thread hands each device's launch to a pool thread and waits for all D of them,
and pool threads then run the D partitions. A launch blocks its pool thread while its device
already holds 32 unfinished programs (XLA's fixed limit per device), and a collective, such as
the server's sum over the sharded task axis, needs all D partitions running at once (XLA runs
one collective program at a time). The simulation never waits for a device value between
server versions, so it runs ahead of the devices; once 32 programs are queued, D launches can
hold D pool threads, a collective's last partition then finds no thread, and XLA aborts the
process after 40 seconds ("Termination timeout for all reduce"). XLA sizes the pool
max(CPU cores, D), which leaves no room: on the 2-core CPU, FedAvg and FedBuff on Fashion-MNIST
with 4 devices, and FedAvg with 2, aborted this way within 20 server versions.

A host thread that launches programs blocks at most D pool threads, so (H + 1) x D threads,
H being the host threads that launch at once, always leave D threads for the collective.
Measured with 600 sums of a sharded [12, 784, 200] array, launched back to back on 4 devices:
aborted with 4 and 5 threads, finished with 8; from two host threads at once, aborted with 8
and finished with 12; from one host thread waiting every 31 sums, finished with 4 (every 64:
aborted). XLA reads the pool size from `PJRT_NPROC` once, when JAX's CPU backend starts:
`reserve` sets it before then, and `check` refuses a sharded executor whose backend started with
a pool too small.
"""

from __future__ import annotations

import os
import re

import jax

from fedsim_jax.executor.choice import cpu_cores

POOL_VARIABLE = 'PJRT_NPROC'
# XLA's pool size: the first of these set to an integer, else the cores; at least one per device.
_POOL_VARIABLES = (POOL_VARIABLE, 'NPROC')
_DEVICE_COUNT_FLAG = re.compile(r'--xla_force_host_platform_device_count=(\d+)')


def _backends_started() -> bool:
  from jax._src import xla_bridge  # no public way to ask without starting them

  return xla_bridge.backends_are_initialized()


def local_cpu_devices() -> int:
  """The CPU devices of this process: those of the started CPU backend, else those it will
  start with (`jax_num_cpu_devices`, else XLA_FLAGS' `--xla_force_host_platform_device_count`,
  else 1)."""
  if _backends_started():
    return len(jax.local_devices(backend='cpu'))
  configured: int = jax.config.jax_num_cpu_devices  # type: ignore[attr-defined]
  if configured >= 0:
    return configured
  counts = _DEVICE_COUNT_FLAG.findall(os.environ.get('XLA_FLAGS', ''))
  return int(counts[-1]) if counts else 1


def _environment_threads() -> int:
  for name in _POOL_VARIABLES:
    try:
      return max(int(os.environ[name]), 0)
    except (KeyError, ValueError):
      continue
  return cpu_cores()


def pool_threads() -> int:
  """The threads of XLA:CPU's pool as the environment sets them (the started backend read the
  same environment, unless it changed since)."""
  return max(_environment_threads(), local_cpu_devices())


def threads_needed(devices: int, host_threads: int = 1) -> int:
  """Pool threads for programs over `devices` devices of this process launched from
  `host_threads` host threads at once: a device's launch each, plus one collective."""
  return max(cpu_cores(), (host_threads + 1) * devices)


def reserve(devices: object, host_threads: int = 1) -> None:
  """Sizes XLA:CPU's pool for a run sharded over `devices` devices (the `executor.devices`
  setting; every device of every process in a multi-process run) from `host_threads` host
  threads, if JAX's backends have not started yet. Does nothing for one device, for a process
  with one CPU device, or where `PJRT_NPROC` is set: an explicit size is kept (`check` refuses
  it when too small)."""
  if isinstance(devices, bool) or not isinstance(devices, int) or devices <= 1:
    return
  if _backends_started() or POOL_VARIABLE in os.environ:
    return
  local = local_cpu_devices()
  if local > 1:
    needed = threads_needed(min(devices, local), host_threads)
    os.environ[POOL_VARIABLE] = str(max(_environment_threads(), needed))


def check(devices: int, local_devices: int, host_threads: int = 1) -> None:
  """Raises ValueError (one line) when XLA:CPU's pool cannot run programs sharded over
  `local_devices` devices of this process (`devices` in all: the `executor.devices` setting)
  launched from `host_threads` host threads at once without deadlocking."""
  have, needed = pool_threads(), threads_needed(local_devices, host_threads)
  if local_devices > 1 and have < needed:
    raise ValueError(
      f'executor.devices={devices} shards over {local_devices} XLA:CPU devices of this process, '
      f"which need {needed} threads in XLA's CPU pool ({host_threads + 1} per device) and JAX "
      f'started with {have}; allowed: executor.devices=1, or {POOL_VARIABLE}>={needed} in the '
      'environment before JAX starts (fedsim-run and run_experiment set it when they start JAX)'
    )
