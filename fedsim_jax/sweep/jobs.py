"""A sweep's runs as jobs, and the jobs run as processes, at most N at a time.

Runs that the engine can run in lockstep (`fedsim_jax.experiment.run_experiments_lockstep`:
configs that differ only in their seeds, `data.partition_seed`, `run.eval_every` and the numeric
hyperparameters of `fedsim_jax.run_spec.LOCKSTEP_HYPERPARAMETERS`, such as the client and server
learning rates) form one job: one process, one data load, shared compiled programs (with the
vmap backend, one vmapped client program for the runs of equal
`fedsim_jax.run_spec.RunSpec.client_program_key`, seeds and learning rates included). Every other
difference starts another job. A job is a JSON file (`<sweep>/jobs/<name>.json`) that `python -m fedsim_jax.sweep.worker`
runs; its output goes to `<sweep>/logs/<name>.log`.

A job's process stops with its parent: it is sent SIGTERM (and checkpoints) when the sweep
process ends for any reason, SIGKILL included, so that no run outlives its sweep and a rerun
finds every unfinished run resumable.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from fedsim_jax.metrics.writers import write_json

_PR_SET_PDEATHSIG = 1
# The command that runs a job file (its path is appended).
WORKER = (sys.executable, '-m', 'fedsim_jax.sweep.worker')
PARENT_ENV = 'FEDSIM_SWEEP_PARENT'  # the sweep's pid, for `stop_with_parent`


@dataclasses.dataclass(frozen=True)
class PlannedRun:
  """One run of a sweep: its point's name and settings, its seed and its workdir."""

  point: str
  settings: tuple[tuple[str, Any], ...]
  seed: int
  workdir: str


@dataclasses.dataclass
class Job:
  """Runs that go to one process (`name` names its job and log files)."""

  name: str
  runs: list[PlannedRun]

  @property
  def points(self) -> list[str]:
    return list(dict.fromkeys(run.point for run in self.runs))

  def describe(self) -> str:
    seeds = sorted({run.seed for run in self.runs})
    points = self.points
    where = points[0] if len(points) == 1 else f'{len(points)} points ({", ".join(points)})'
    return f'{where}, seed{"s" if len(seeds) > 1 else ""} {",".join(map(str, seeds))}'


def lockstep_jobs(runs: Sequence[PlannedRun], keys: Sequence[Any]) -> list[Job]:
  """`runs` grouped into jobs: runs with equal `keys` (their configs without the settings a
  lockstep sweep may vary) share one, in the order of their first run."""
  if len(runs) != len(keys):
    raise ValueError('lockstep_jobs needs one key per run')
  from fedsim_jax.lifecycle.lockstep import equal_key_groups  # Deferred: JAX start-up.

  groups = [[runs[i] for i in members] for members in equal_key_groups(keys)]
  jobs = []
  for members in groups:
    points = list(dict.fromkeys(run.point for run in members))
    name = points[0] if len(points) == 1 else f'{points[0]}+{len(points) - 1}'
    jobs.append(Job(name, members))
  return jobs


def write_job(job: Job, root: str, config_args: Sequence[str]) -> str:
  """Writes the job file the worker reads; returns its path. Setting values are written as
  Python literals (`repr`), which the worker reads back exactly (tuples stay tuples)."""
  path = os.path.join(root, 'jobs', f'{job.name}.json')
  os.makedirs(os.path.dirname(path), exist_ok=True)
  write_json(
    path,
    {
      'config_args': list(config_args),
      'runs': [
        {
          'seed': run.seed,
          'workdir': os.path.abspath(run.workdir),
          'settings': [[p, repr(v)] for p, v in run.settings],
        }
        for run in job.runs
      ],
    },
  )
  return path


def stop_with_parent() -> None:
  """In a job's process, first thing: SIGTERM when the sweep process that started it ends
  (Linux's PR_SET_PDEATHSIG; `PARENT_ENV` names the sweep's pid). Set by the job itself rather
  than between fork and exec, which is unsafe in a multithreaded (JAX) process."""
  parent = os.environ.get(PARENT_ENV)
  if parent is None:
    return
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  except (OSError, AttributeError):  # not Linux: the job outlives a killed sweep
    return
  if os.getppid() != int(parent):  # the sweep ended before prctl took effect
    os.kill(os.getpid(), signal.SIGTERM)


@dataclasses.dataclass
class Outcome:
  """How one job's process ended."""

  job: Job
  returncode: int
  log: str


class JobPool:
  """Runs jobs as worker processes (`worker` + the job file), at most `processes` at a time.

  SIGINT or SIGTERM to the sweep stops it cleanly: no job starts after it, and running jobs are
  sent the same signal once (each writes checkpoints and exits); `interrupted` is then the
  signal's number.
  """

  def __init__(self, root: str, processes: int, worker: Sequence[str] = WORKER) -> None:
    self.root = root
    self.processes = processes
    self.worker = list(worker)
    self.interrupted: int | None = None
    self._running: dict[subprocess.Popen[bytes], tuple[Job, str, Any]] = {}

  def _start(self, job: Job, job_file: str) -> None:
    log_path = os.path.join(self.root, 'logs', f'{job.name}.log')
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log_file = open(log_path, 'ab')  # noqa: SIM115 - closed when the job ends
    log_file.write(f'--- {time.strftime("%Y-%m-%d %H:%M:%S")} {job.describe()}\n'.encode())
    log_file.flush()
    process = subprocess.Popen(
      [*self.worker, job_file],
      stdout=log_file,
      stderr=subprocess.STDOUT,
      stdin=subprocess.DEVNULL,
      start_new_session=True,  # a terminal's Ctrl-C reaches the sweep, which forwards it once
      env={**os.environ, PARENT_ENV: str(os.getpid())},
    )
    self._running[process] = (job, log_path, log_file)
    if self.interrupted is not None:  # the signal came as this job was starting
      process.send_signal(self.interrupted)

  def _forward(self, signum: int, frame: Any) -> None:
    del frame
    if self.interrupted is None:
      self.interrupted = signum
      for process in self._running:
        if process.poll() is None:
          process.send_signal(signum)

  def run(
    self,
    jobs: Sequence[tuple[Job, str]],
    on_start: Callable[[Job], None],
    on_end: Callable[[Outcome], None],
  ) -> list[Outcome]:
    """Runs `jobs` ((job, job file) pairs) in order, `processes` at a time; calls `on_start`
    and `on_end` as each starts and ends; returns each started job's outcome."""
    queue = collections.deque(jobs)
    outcomes: list[Outcome] = []
    previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
      while queue or self._running:
        while queue and self.interrupted is None and len(self._running) < self.processes:
          job, job_file = queue.popleft()
          self._start(job, job_file)
          on_start(job)
        for process in [p for p in self._running if p.poll() is not None]:
          job, log_path, log_file = self._running.pop(process)
          log_file.close()
          outcome = Outcome(job, process.returncode, log_path)
          outcomes.append(outcome)
          on_end(outcome)
        if self.interrupted is not None and not self._running:
          break
        time.sleep(0.05)
    finally:
      for number, handler in previous.items():
        signal.signal(number, handler)
    return outcomes
