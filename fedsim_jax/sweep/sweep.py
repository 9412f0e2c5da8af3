"""A sweep in its folder: its runs checked and planned, their states, their jobs run, its table.

`Sweep` is what `fedsim-sweep` does, usable from Python too:

  sweep = Sweep(SweepSpec({'client.learning_rate': (0.01, 0.1)}, seeds=(0, 1)), config=config,
                config_args=['--config=fedsim_jax.configs.fedavg_fashion_mnist'],
                root='runs/lr_sweep')
  sweep.run(processes=2)
  print(sweep.table('final_accuracy'))

Runs that may run in lockstep share a job (one process): the seeds of a point, and the points
that differ only in numeric hyperparameters (`fedsim_jax.run_spec.LOCKSTEP_HYPERPARAMETERS`:
the client and server learning rates and momenta, the staleness exponent, ...), so the grid
above is one job of four runs; with the vmap backend its four runs train as one vmapped client
program (`fedsim_jax.lifecycle.lockstep`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from fedsim_jax import cli
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.analysis.run_files import POINT_FILE
from fedsim_jax.metrics.writers import write_json, write_text
from fedsim_jax.settings import ConfigError
from fedsim_jax.sweep.jobs import Job, JobPool, Outcome, PlannedRun, lockstep_jobs, write_job
from fedsim_jax.sweep.paths import set_existing, stale_setting
from fedsim_jax.sweep.runs import RunState, run_state, status_table
from fedsim_jax.sweep.spec import SweepSpec

MANIFEST = 'sweep.json'
TABLE_MARKDOWN = 'table.md'
TABLE_CSV = 'table.csv'
METRICS = {
  # --metric: (compare's column, whether higher is better)
  'final_accuracy': ('final_accuracy_mean', True),
  'best_accuracy': ('best_accuracy_mean', True),
  'time_to_target': ('time_to_target_mean', False),
  'client_updates_to_target': ('client_updates_to_target_mean', False),
}


class Sweep:
  """The sweep `spec` of `config` in the folder `root`.

  Construction checks everything a run will check (each point's settings and values, with
  every seed) and that the finished runs `root` already holds were made with the requested
  settings; a problem is one line on stderr and exit code 2, before anything is written.

  Args:
    spec: the points and seeds.
    config: the base config (`--config` and its overrides applied).
    config_args: the `--config...` arguments that rebuild `config` in a job's process.
    root: the sweep's folder.
    override_paths: the settings the command line set with `--config.<path>`: a finished run
      is reused only if it has the requested value of these, the swept and the fixed ones.
  """

  def __init__(
    self,
    spec: SweepSpec,
    config: Any,
    config_args: Sequence[str],
    root: str,
    override_paths: Sequence[str] = (),
  ) -> None:
    from fedsim_jax.run_spec import as_spec  # Deferred: JAX start-up after the flag checks.

    if not root.strip():
      cli.fail('--workdir is empty; allowed: a directory path')
    self.spec, self.root, self.config_args = spec, root, list(config_args)
    self.points = spec.points()
    self.runs: list[PlannedRun] = []
    self._lockstep_keys: list[Any] = []
    checked = (*spec.parameters, *spec.fixed, *override_paths)
    for point in self.points:
      point_config = config.copy_and_resolve_references()
      settings = (*spec.fixed.items(), *point.settings)
      for path, value in settings:
        try:
          set_existing(point_config, path, value)
        except ConfigError as error:
          cli.fail(f'{"--sweep." if path in spec.parameters else ""}{path}: {error}')
      for seed in spec.seeds:
        run_config = point_config.copy_and_resolve_references()
        run_config.seed = seed
        workdir = os.path.join(root, point.name, f'seed{seed}')
        try:
          run_spec = as_spec(run_config)
        except ConfigError as error:
          cli.fail(f'point {point.name}: {error}')
        stale = stale_setting(workdir, run_config, checked) if _ended(workdir) else None
        if stale is not None:
          cli.fail(
            f'{workdir} holds a finished run made with {stale}; allowed: the settings it was '
            'made with, or another --workdir'
          )
        self.runs.append(PlannedRun(point.name, tuple(settings), seed, workdir))
        self._lockstep_keys.append(run_spec.without_hyperparameters())

  def states(self) -> list[RunState]:
    """Where each run stands, in plan order."""
    return [run_state(run.workdir) for run in self.runs]

  def jobs(self, todo: Sequence[int] | None = None) -> list[Job]:
    """The jobs (processes) that run the runs `todo` (indices into `runs`; default: all):
    runs that may run in lockstep share one."""
    todo = range(len(self.runs)) if todo is None else todo
    return lockstep_jobs([self.runs[i] for i in todo], [self._lockstep_keys[i] for i in todo])

  def status(self) -> str:
    """The `--status` table: every run's state, host time and last evaluated version."""
    return status_table(self.states(), self.root)

  def _write_manifest(self) -> None:
    from fedsim_jax.provenance import code_version

    write_json(
      os.path.join(self.root, MANIFEST),
      {
        'command': sys.argv,
        'config_args': self.config_args,
        'search': self.spec.search.value,
        'num_points': self.spec.num_points,
        'search_seed': self.spec.search_seed,
        'seeds': list(self.spec.seeds),
        'parameters': {
          p: str(v) if not isinstance(v, tuple) else [repr(x) for x in v]
          for p, v in self.spec.parameters.items()
        },
        'fixed': {p: repr(v) for p, v in self.spec.fixed.items()},
        'points': [point.name for point in self.points],
        'code': code_version(),
      },
    )
    for point in self.points:
      folder = os.path.join(self.root, point.name)
      os.makedirs(folder, exist_ok=True)
      write_json(os.path.join(folder, POINT_FILE), {p: _jsonable(v) for p, v in point.settings})

  def run(self, processes: int = 1, log: Callable[[str], None] = print) -> int:
    """Runs every run that has not ended (`processes` jobs at a time); returns the exit code
    (see `fedsim_jax.sweep.command`)."""
    problem = workdir_lib.writable_directory_problem(self.root)
    if problem is not None:
      cli.fail(f'--workdir={self.root}: {problem}; allowed: a folder this user can write')
    try:
      lock = workdir_lib.WorkdirLock(self.root)
    except ConfigError as error:
      cli.fail(str(error).replace('by a running run', 'by a running sweep'))
    try:
      return self._run_locked(processes, log)
    finally:
      lock.release()

  def _run_locked(self, processes: int, log: Callable[[str], None]) -> int:
    states = self.states()
    running = [s.run_dir for s in states if s.state == 'running']
    if running:
      cli.fail(
        f'{running[0]} is in use by another process ({len(running)} runs are); allowed: wait '
        'for it to end, or stop it'
      )
    todo = [i for i, s in enumerate(states) if s.state in ('pending', 'resumable')]
    self._write_manifest()
    done = len(self.runs) - len(todo)
    log(
      f'{len(self.points)} points x {len(self.spec.seeds)} seeds = {len(self.runs)} runs: '
      f'{done} ended, {len(todo)} to run'
    )
    jobs = self.jobs(todo)
    files = [(job, write_job(job, self.root, self.config_args)) for job in jobs]
    counter = iter(range(1, len(jobs) + 1))

    def started(job: Job) -> None:
      log(f'[{next(counter)}/{len(jobs)}] started {job.describe()}')

    def ended(outcome: Outcome) -> None:
      how = 'done' if outcome.returncode == 0 else f'exit {outcome.returncode} (log: {outcome.log})'
      log(f'ended {outcome.job.describe()}: {how}')

    pool = JobPool(self.root, processes)
    pool.run(files, started, ended)
    if pool.interrupted is not None:
      print(
        f'interrupted: jobs checkpointed; rerun the same command to continue the sweep in '
        f'{os.path.abspath(self.root)}',
        file=sys.stderr,
      )
      return 128 + pool.interrupted
    unfinished = [s for s in self.states() if s.state not in ('done', 'failed')]
    if unfinished:
      print(
        f'error: {len(unfinished)} runs did not end (first: {unfinished[0].run_dir}, '
        f'{unfinished[0].state}); see {os.path.join(self.root, "logs")}, then rerun to continue',
        file=sys.stderr,
      )
      return 2
    return 0

  def has_results(self) -> bool:
    return any(s.state == 'done' for s in self.states())

  def table(self, metric: str = 'final_accuracy', target: float | None = None) -> str:
    """`fedsim-compare`'s table of the points (their completed runs), written to
    `<root>/table.md` and `table.csv`, and the best point by `metric`."""
    from fedsim_jax.analysis import compare
    from fedsim_jax.analysis.run_files import finished_only, is_workdir, load

    groups = [
      [
        load(run.workdir, label=point.name)
        for run in self.runs
        if run.point == point.name and is_workdir(run.workdir)
      ]
      for point in self.points
    ]
    kept, notes = finished_only([g for g in groups if g])
    for note in notes:
      print(f'fedsim-sweep: unfinished run {note}', file=sys.stderr)
    rows = compare.compare(kept, target=target)
    markdown = compare.format_table(rows, label_header='point')
    column, higher = METRICS[metric]
    ranked = [row for row in rows if row[column] is not None]
    if ranked:
      best = (max if higher else min)(ranked, key=lambda row: row[column])
      std = best.get(column.replace('_mean', '_std'))
      spread = f' ± {std:.4f}' if std is not None else ''
      line = (
        f'best by {metric.replace("_", " ")}: {best["label"]} ({best[column]:.4f}{spread}, '
        f'{best["seeds"]} seeds)'
      )
    else:
      line = f'best by {metric.replace("_", " ")}: none (no point has it)'
    text = markdown + '\n' + line + '\n'
    write_text(os.path.join(self.root, TABLE_MARKDOWN), text)
    write_text(os.path.join(self.root, TABLE_CSV), compare.format_csv(rows))
    return text


def _ended(workdir: str) -> bool:
  return run_state(workdir).state in ('done', 'failed')


def _jsonable(value: Any) -> Any:
  return list(value) if isinstance(value, tuple) else value
