"""A built run's life in its workdir: its outputs, checkpoints, evaluations and end.

`RunLifecycle` receives a run's built parts (`RunParts`: simulation, evaluator, stop condition,
the settings it runs by) and a claimed workdir (`Workspace`), and does everything that writes:
resuming from a checkpoint, the metrics, task and TensorBoard logs, periodic checkpoints,
divergence, SIGINT/SIGTERM, and the summary and final outputs a run ends with. It builds
nothing and reads no config: `fedsim_jax.experiment` builds the parts.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from absl import logging

from fedsim_jax import distributed, interrupts
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.checkpointing import Checkpoints
from fedsim_jax.lifecycle.parts import OnDivergence, RunParts
from fedsim_jax.lifecycle.resume import checkpoint_to_resume, task_trace_writer
from fedsim_jax.lifecycle.summary import (
  eta,
  failure_fields,
  finite_or_none,
  progress,
  simulation_fields,
)
from fedsim_jax.lifecycle.workspace import Workspace
from fedsim_jax.metrics import MetricsWriter, write_json
from fedsim_jax.metrics.mlflow_writer import MlflowWriter
from fedsim_jax.metrics.run_writer import RunInfo, RunWriter, WriterFactory
from fedsim_jax.metrics.tensorboard import TensorBoardWriter, tensorboard_available
from fedsim_jax.provenance import code_record, code_version
from fedsim_jax.runtime import Simulation, SimulationStalled
from fedsim_jax.runtime.statistics import statistics
from fedsim_jax.runtime.task_trace import AnnotatedTaskLog
from fedsim_jax.saved_run import MODELS_DIR, save_models
from fedsim_jax.transforms.accounting import BudgetExhausted
from fedsim_jax.workdir import RunStatus

STATUSES = workdir_lib.ENDED_STATUSES  # the statuses a run can end with (`finish`)


CLIENTS_EVAL_FILE = 'clients_eval.jsonl'  # per-client values of each evaluation
CLIENT_FIGURES = (
  'client_accuracy',
  'client_loss',
  'clients_evaluated',
  'personalized_accuracy',
  'personal_model_accuracy',
)


class Diverged(Exception):
  """The evaluated model's test loss or parameters became NaN or infinite (the message is the
  one line the binary prints)."""


def _all_finite(tree: Any) -> bool:
  return all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree_util.tree_leaves(tree))


class RunLifecycle:
  """A built run in its workdir, from its first output to its summary.

  Constructing it starts the run's outputs: it resumes from the newest checkpoint if `resume`
  (or starts afresh, clearing the workdir's results), writes a `running` summary and
  `config.json`, and opens the metrics, task and TensorBoard logs; `start` then records the
  first evaluation (or restores the checkpointed simulation). `run` runs the simulation to its
  end; lockstep sweeps (`fedsim_jax.lifecycle.lockstep`) drive several with `run_until_stopped`
  and `finish_stopped`.
  """

  def __init__(
    self,
    workspace: Workspace,
    parts: RunParts,
    *,
    resume: bool,
    host_start: float,
    host_extra: Mapping[str, Any] | None = None,
    writers: Sequence[WriterFactory] = (),
  ) -> None:
    self.primary = workspace.primary
    self.workdir = workspace.path
    self._lock = workspace.lock
    self.host_start = host_start
    self.options = options = parts.options
    self.dataset = dataset = parts.dataset
    self.model_description = parts.model_description
    self.algorithm_settings = parts.algorithm_settings
    self.simulation = parts.simulation
    self.stop = parts.stop
    self.executor_like = parts.executor_like
    self._evaluate = parts.evaluate
    self.privacy = parts.privacy
    self.transforms_summary = dict(parts.transforms_summary or {})
    self._budget_message: str | None = None  # set when the next aggregation would exceed it
    self.checkpoints = Checkpoints(workspace.checkpoint_dir, keep=options.keep_checkpoints)
    resolved = parts.resolved_config
    restored = (
      checkpoint_to_resume(
        self.checkpoints, self.workdir, resolved, self.algorithm_settings, parts.selections
      )
      if resume
      else None
    )
    # Everything is checked: from here on the run writes.
    if restored is None:
      workdir_lib.clear_results(self.workdir)  # --overwrite, or nothing to resume
    self._resolved_config = json.loads(json.dumps(resolved))
    run_state = restored.state['run'] if restored is not None else {}
    # Where the rows and summary go besides metrics.jsonl and summary.json (process 0's only:
    # another process's workdir is temporary, and a tracker would count its run twice). Opened
    # before the run's own files, so that a tracking store that cannot be opened stops the run
    # (`WriterError`, one line) before it writes anything.
    self.writers: list[RunWriter] = []
    if self.primary:
      run_info = RunInfo(
        os.path.abspath(self.workdir), self._resolved_config, list(run_state.get('rows', ()))
      )
      for factory in (*self._standard_writers(), *writers):
        try:
          self.writers.append(factory(run_info))
        except BaseException:
          for opened in self.writers:
            opened.close()
          raise
    self._writers_ended = False
    # At once, so that a run killed from here on (an extension of a finished run included)
    # never leaves an earlier end's summary beside newer metrics.
    self._write_summary({'status': RunStatus.RUNNING})
    write_json(os.path.join(self.workdir, 'config.json'), resolved)
    self.writer = MetricsWriter(self.workdir, rows=run_state.get('rows', ()))
    self.client_evaluate = parts.client_evaluate
    self.client_writer = (
      None
      if self.client_evaluate is None
      else MetricsWriter(
        self.workdir, rows=run_state.get('client_rows') or (), filename=CLIENTS_EVAL_FILE
      )
    )
    self.task_trace = task_trace_writer(
      self.workdir, primary=self.primary, write_tasks=options.write_tasks, restored=restored
    )
    self._client_classes = (
      None
      if dataset.straggler_mask is None
      else {'straggler': dataset.straggler_mask, 'standard': ~dataset.straggler_mask}
    )
    self._last_evaluated: int = run_state.get('last_evaluated', -1)
    # Host time and number of the earlier processes of this run, up to the checkpoint it
    # resumed from (work done after that checkpoint was lost and is redone); None when the
    # checkpoint predates the record.
    self._earlier_host_seconds: float | None = (
      run_state.get('host_seconds') if restored is not None else 0.0
    )
    earlier_processes = run_state.get('processes_run') if restored is not None else 0
    self._processes_run = None if earlier_processes is None else earlier_processes + 1
    # The code of every process of this run, oldest first (None: before a checkpoint that
    # predates the record).
    self._code = [*(run_state.get('code', [None]) if restored is not None else []), code_version()]
    self._best = run_state.get('best')  # (accuracy, version, evaluated params) or None
    # e.g. the executor's settings and lockstep batching figures, for summary['host']
    self.host_extra: dict[str, Any] = dict(host_extra or {})
    self._checkpoint_requested = False
    self._last_checkpoint_time = time.perf_counter()
    self._warned_divergence = False
    self._outputs_closed = False
    self._final_summary: dict[str, Any] | None = None  # the summary `finish` wrote
    self.checkpoint_seconds = 0.0  # host time spent writing checkpoints (this process)
    self.checkpoints_written = 0
    self._progress_start: tuple[float, float] | None = None  # (host time, progress) of the pace
    self._restored = restored
    self.simulation.on_version = self._on_version
    self.simulation.task_log = (
      self.task_trace
      if self.task_trace is None or parts.annotate_task is None
      else AnnotatedTaskLog(self.task_trace, parts.annotate_task)
    )

  def _standard_writers(self) -> list[WriterFactory]:
    """The writers the run's settings ask for (`run.tensorboard`, `run.mlflow`)."""
    options = self.options
    factories: list[WriterFactory] = []
    if options.mlflow is not None:  # first: the one that may fail to open
      uri, experiment = options.mlflow, options.mlflow_experiment
      factories.append(lambda run: MlflowWriter(run, uri, experiment))
    if options.tensorboard:
      if tensorboard_available():
        factories.append(TensorBoardWriter.for_run)
      else:
        logging.info('run.tensorboard: tensorboardX is not installed; no TensorBoard log')
    return factories

  def start(self) -> None:
    """Starts the simulation's clock: records the first evaluation of a new run, or restores a
    resumed run's simulation from its checkpoint."""
    restored, self._restored = self._restored, None
    if restored is None:
      self.record(self.simulation)
    else:
      self.simulation.restore(restored.state['simulation'])
      logging.info(
        'resumed from checkpoint %d: version %d, virtual time %.1fs',
        restored.step,
        self.simulation.version,
        self.simulation.now,
      )
    self.simulation_start = time.perf_counter()
    self._progress_start = (self.simulation_start, progress(self.stop, self.simulation) or 0.0)

  def _on_version(self, sim: Simulation) -> None:
    """After every server update: the evaluation and checkpoint that are due."""
    if sim.version % self.options.eval_every == 0:
      self.record(sim)
    if self._checkpoint_due(sim):
      self._checkpoint_requested = True
      sim.request_pause()  # the checkpoint is written once the current event is done
    if self._budget_reached(sim):
      sim.request_pause()  # the run stops once the current event is done

  def _budget_reached(self, sim: Simulation) -> bool:
    """True (and the message kept) when one more aggregation would exceed the run's epsilon
    budget (`privacy.kwargs.epsilon_budget`)."""
    if self.privacy is None:
      return False
    try:
      self.privacy.check_next(sim.server_state)
    except BudgetExhausted as error:
      self._budget_message = str(error)
      return True
    return False

  def _checkpoint_due(self, sim: Simulation) -> bool:
    every, minutes = self.options.checkpoint_every, self.options.checkpoint_every_minutes
    return (every is not None and sim.version % every == 0) or (
      minutes is not None and time.perf_counter() - self._last_checkpoint_time >= 60 * minutes
    )

  def save_checkpoint(self) -> None:
    """Writes the whole run's state (simulation and outputs so far) as a new checkpoint."""
    sim = self.simulation
    start = time.perf_counter()
    state = {
      'simulation': sim.state(),
      'run': {
        'rows': self.writer.rows,
        'client_rows': None if self.client_writer is None else self.client_writer.rows,
        'tasks_offset': None if self.task_trace is None else self.task_trace.offset(),
        'last_evaluated': self._last_evaluated,
        'best': self._best,
        'host_seconds': self._total_host_seconds(),
        'processes_run': self._processes_run,
        'code': self._code,
      },
    }
    if self.options.distributed:  # every process gathers; process 0 writes
      state = distributed.to_host(state)
    if self.primary:
      self.checkpoints.save(
        state, {'version': sim.version, 'virtual_time': sim.now, 'config': self._resolved_config}
      )
    for writer in self.writers:
      writer.flush()
    self._checkpoint_requested = False
    self._last_checkpoint_time = time.perf_counter()
    self.checkpoint_seconds += self._last_checkpoint_time - start
    self.checkpoints_written += 1

  def record(self, sim: Simulation) -> None:
    """Evaluates the server model and writes a metrics row."""
    eval_params = sim.eval_params
    metrics = self._evaluate(eval_params)
    self._last_evaluated = sim.version
    diverged = not (math.isfinite(metrics['loss']) and _all_finite((eval_params, sim.params)))
    if diverged and self.options.on_divergence == OnDivergence.STOP:
      raise Diverged(self._divergence_message(sim, metrics['loss']))
    if diverged and not self._warned_divergence:
      self._warned_divergence = True
      logging.warning('%s; continuing (run.on_divergence)', self._divergence_message(sim, None))
    if not diverged and (self._best is None or metrics['accuracy'] > self._best[0]):
      self._best = (float(metrics['accuracy']), sim.version, eval_params)
    row = {
      'virtual_time': sim.now,
      'version': sim.version,
      'client_updates': sim.client_updates,
      'gradient_steps': sim.gradient_steps,
      'test_accuracy': metrics['accuracy'],
      'test_loss': metrics['loss'],
      **{
        f'test_{name}': value
        for name, value in metrics.items()
        if name not in ('accuracy', 'loss', 'num_examples')
      },
      **statistics(sim, self._client_classes, window=True),
      **(self.privacy.row(sim.server_state) if self.privacy is not None else {}),
    }
    if self.client_evaluate is not None and self.client_writer is not None:
      # Each client's own model, where the algorithm keeps one (Ditto's v_k, FedBN's norms).
      own = getattr(sim.scheduler, 'personal_models_of', None)
      clients = self.client_evaluate(eval_params, sim.version, own)
      row.update(clients.row())
      self.client_writer.write(clients.record(sim.version, sim.now))
    if diverged:  # (the summary's best accuracy and the best model skip this evaluation)
      row['diverged'] = True
    sim.reset_window()
    row = {name: finite_or_none(value) for name, value in row.items()}
    self.writer.write(row)
    for writer in self.writers:
      writer.write_metrics(row)
    logging.info(
      '%s  virtual time %.1fs  client updates %d  test accuracy %.4f  loss %.4f  host %.1fs%s',
      self._version_progress(sim),
      sim.now,
      sim.client_updates,
      metrics['accuracy'],
      metrics['loss'],
      time.perf_counter() - self.host_start,
      eta(progress(self.stop, sim), self._progress_start, time.perf_counter()),
    )

  def _version_progress(self, sim: Simulation) -> str:
    limit = self.stop.max_versions
    return f'version {sim.version}/{limit}' if limit else f'version {sim.version}'

  def _divergence_message(self, sim: Simulation, loss: float | None) -> str:
    rates = self.options.learning_rates
    what = 'non-finite parameters' if loss is None or math.isfinite(loss) else f'test loss {loss}'
    return (
      f'diverged at version {sim.version} (virtual time {sim.now:.1f}s): {what}; algorithm '
      f'{self.options.algorithm}, {", ".join(rates)}; lower the learning rates, or set '
      "run.on_divergence='continue'"
    )

  def run(self) -> dict[str, Any]:
    """Runs the simulation to its stop condition, checkpointing on the way and at the end;
    returns the summary.

    SIGINT/SIGTERM stop it cleanly: a checkpoint and an `interrupted` summary
    (`summary['signal']`) are written; one that arrives while the final outputs are written
    waits for them (the run completes), and a second signal stops the run at once (an
    `interrupted` summary; its newest checkpoint is what `--resume` continues). A checkpoint or
    output that cannot be written (a full disk, a read-only folder) ends it as `failed`, with a
    one-line `message` naming the path and the cause.
    """
    with interrupts.stop_requests(self.simulation.request_pause) as interrupt:
      try:
        status, extra = self.run_until_stopped(interrupt)
        summary = self.finish_stopped(status, extra)
      except KeyboardInterrupt:  # a second SIGINT
        return self._stopped_at_once(signal.SIGINT)
      except Exception as error:
        self._fail(error)
        raise
    if interrupt.signal is not None and summary['status'] == RunStatus.COMPLETED:
      logging.warning('the stop request came as the run ended: its outputs were completed first')
    return summary

  def run_until_stopped(self, interrupt: interrupts.Interrupt) -> tuple[RunStatus, dict[str, Any]]:
    """Runs the simulation until its stop condition, `interrupt`'s signal, a divergence, a
    stall or an output it cannot write, checkpointing on the way and (unless it diverged or
    stalled) at the end; returns the status and the summary fields for `finish_stopped`. Any
    other error writes a `failed` summary and is raised. `interrupt` is installed by the caller
    (`run`, or a lockstep sweep's, which pauses every simulation of the sweep)."""
    sim = self.simulation
    try:
      self._budget_reached(sim)  # (a budget that not even one aggregation fits)
      while interrupt.signal is None and self._budget_message is None:
        sim.run(self.stop)
        if interrupt.signal is not None or sim.finished(self.stop):
          break
        if self._checkpoint_requested:
          self.save_checkpoint()
      self.save_checkpoint()
    except Diverged as error:
      return RunStatus.DIVERGED, {'message': str(error)}
    except SimulationStalled as error:
      return RunStatus.FAILED, {'message': str(error)}
    except OSError as error:  # a checkpoint, metrics row or task record that cannot be written
      return RunStatus.FAILED, failure_fields(error, self.workdir)
    except Exception as error:
      self._fail(error)
      raise
    if self._budget_message is not None and not sim.finished(self.stop):
      return RunStatus.BUDGET_EXHAUSTED, {'message': self._budget_message}
    if interrupt.signal is not None and not sim.finished(self.stop):
      return RunStatus.INTERRUPTED, {'signal': interrupt.signal}
    return RunStatus.COMPLETED, {}  # (a signal that came as the run reached its end waits)

  def finish_stopped(self, status: str, extra: dict[str, Any]) -> dict[str, Any]:
    """`finish(status, **extra)` for a run that `run_until_stopped` stopped; a divergence found
    by the final evaluation ends it as `diverged` (before anything final was written)."""
    try:
      return self.finish(status, **extra)
    except Diverged as error:
      return self.finish(RunStatus.DIVERGED, message=str(error))

  def _fail(self, error: Exception) -> None:
    """Ends a run on an unexpected error (raised on by the caller): a `failed` summary, if it
    can be written, and the workdir's lock released."""
    summary = self._summary(RunStatus.FAILED, error=f'{type(error).__name__}: {error}')
    with contextlib.suppress(OSError):
      self._write_summary(summary)
    self._end_writers(summary)
    self._lock.release()

  def _stopped_at_once(self, signum: int) -> dict[str, Any]:
    """Ends a run that a second signal stopped in the middle of whatever it was doing."""
    if self._final_summary is not None:  # it had ended already
      self._lock.release()
      return self._final_summary
    self._close_outputs(unresolved_tasks=False)  # the simulation may be mid-event
    summary = self._summary(
      RunStatus.INTERRUPTED,
      signal=signum,
      message='stopped at once by a second signal; --resume continues from the newest checkpoint',
    )
    with contextlib.suppress(OSError):
      self._write_summary(summary)
    self._end_writers(summary)
    self._lock.release()
    return summary

  def _summary(self, status: RunStatus, **extra: Any) -> dict[str, Any]:
    sim, options = self.simulation, self.options
    simulation_seconds = time.perf_counter() - self.simulation_start
    summary = {'status': status, **extra}
    summary.update(
      simulation_fields(sim, self.writer.rows, options.target_accuracy, self._client_classes)
    )
    if self.privacy is not None:
      summary['privacy'] = self.privacy.summary(sim.server_state)
    if self.transforms_summary:
      summary['transforms'] = self.transforms_summary
    if self.client_writer is not None and self.writer.rows:
      last = self.writer.rows[-1]
      summary['client_evaluation'] = {
        name: value for name, value in last.items() if name.startswith(CLIENT_FIGURES)
      }
    summary['host'] = {
      'seconds': time.perf_counter() - self.host_start,
      'total_seconds': self._total_host_seconds(),
      'processes_run': self._processes_run,
      'code': code_record(self._code),
      'simulation_seconds': simulation_seconds,
      'compiled_client_programs': sim.executor.num_compiled_programs,
      'checkpoints_written': self.checkpoints_written,
      'checkpoint_seconds': self.checkpoint_seconds,
      'client_examples_per_second': (
        sim.executor.steps_run * options.batch_size / max(simulation_seconds, 1e-9)
      ),
      **self.host_extra,
    }
    return summary

  def _total_host_seconds(self) -> float | None:
    """Host seconds this run's result has cost: this process's so far plus the earlier
    processes' up to the checkpoint this one resumed from (None if they are unknown)."""
    if self._earlier_host_seconds is None:
      return None
    return self._earlier_host_seconds + time.perf_counter() - self.host_start

  def _write_summary(self, summary: dict[str, Any]) -> None:
    write_json(os.path.join(self.workdir, 'summary.json'), summary)

  def _end_writers(self, summary: Mapping[str, Any], artifacts: Sequence[str] = ()) -> None:
    """Hands each writer the run's `artifacts` and final summary, and closes it, once. The
    run's own outputs are written by then: a writer that fails is a warning, not a failed
    run (its tracker misses the rest)."""
    if self._writers_ended:
      return
    self._writers_ended = True
    for writer in self.writers:
      try:
        for path in artifacts:
          writer.log_artifact(path)
        writer.write_summary(summary)
        writer.close()
      except Exception as error:  # noqa: BLE001 - any tracker's error: the run has ended
        logging.warning(
          '%s could not end: %s: %s', type(writer).__name__, type(error).__name__, error
        )

  def _close_outputs(self, unresolved_tasks: bool = True) -> OSError | None:
    """Closes metrics.jsonl and tasks.jsonl (after the tasks still unresolved, unless not
    `unresolved_tasks`) and flushes the writers (the TensorBoard log), once; returns the error
    of one that could not be written out (a full disk), if any."""
    if self._outputs_closed:
      return None
    self._outputs_closed = True
    failure = None
    closes: list[Callable[[], Any]] = [self.writer.close]
    if self.client_writer is not None:
      closes.append(self.client_writer.close)
    if self.task_trace is not None:
      if unresolved_tasks:  # after the last checkpoint: a resumed run truncates them
        closes.append(self.simulation.write_unresolved_tasks)
      closes.append(self.task_trace.close)
    closes.extend(writer.flush for writer in self.writers)
    for close in closes:
      try:
        close()
      except OSError as error:
        failure = failure or error
    return failure

  def _write_final_outputs(self) -> list[str]:
    """Writes `clients.json` and the saved models of a completed run; returns their paths."""
    sim = self.simulation
    write_json(
      os.path.join(self.workdir, 'clients.json'),
      {
        'dispatched': sim.dispatch_counts.tolist(),
        'aggregated': sim.aggregated_counts.tolist(),
        'gradient_steps': sim.steps_per_client.tolist(),
        'busy_time': sim.busy_time.tolist(),
      },
    )
    models = {'final': sim.params}
    if self._best is not None:
      models['best'] = self._best[2]
    if sim.eval_params is not sim.params:
      models['evaluated'] = sim.eval_params
    if self.options.distributed:
      models = distributed.to_host(models)
    if self.primary:
      save_models(self.workdir, self.model_description, models)
    return [os.path.join(self.workdir, name) for name in ('clients.json', MODELS_DIR)]

  def finish(self, status: str = RunStatus.COMPLETED, **extra: Any) -> dict[str, Any]:
    """Writes `summary.json` (and, for a completed run, the final evaluation, `clients.json`
    and the saved models); returns the summary. A completed run whose outputs cannot be written
    ends `failed` instead (`failure_fields`)."""
    if status not in STATUSES:
      raise ValueError(f'status={status!r}; allowed: {tuple(str(s) for s in STATUSES)}')
    status = RunStatus(status)
    sim = self.simulation
    finished = status in workdir_lib.FINISHED_STATUSES
    if finished and self._last_evaluated != sim.version:
      self.record(sim)
    failure = self._close_outputs()
    artifacts: list[str] = []
    if finished and failure is None:
      try:
        artifacts = self._write_final_outputs()
      except OSError as error:
        failure = error
    if finished and failure is not None:
      status, extra = RunStatus.FAILED, failure_fields(failure, self.workdir)
    summary = self._summary(status, **extra)
    try:
      self._write_summary(summary)
    except OSError as error:  # summary.json still says 'running': the run reads as killed
      if status == RunStatus.COMPLETED:
        summary = self._summary(RunStatus.FAILED, **failure_fields(error, self.workdir))
      else:
        logging.warning('cannot write %s (%s)', error.filename, error.strerror)
    self._final_summary = summary
    self._end_writers(summary, artifacts if summary['status'] == status else ())
    self._lock.release()
    if not self.primary:
      shutil.rmtree(self.workdir, ignore_errors=True)
    return summary
