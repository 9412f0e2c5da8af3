"""Scaling curves: host seconds per server version and peak RSS against the work.

  .venv/bin/python benchmarks/scaling.py --reduced                 # about a minute
  .venv/bin/python benchmarks/scaling.py --curves=cohort,model --output=runs/scaling.jsonl
  .venv/bin/python benchmarks/scaling.py --export=docs/results/data/scaling.json   # every curve

Curves (`--curves`), all on the MLP (784-200-200-10 unless the curve varies it) and synthetic
28x28x1 data (no downloads):

  cohort      FedAvg's cohort, FedBuff's concurrency (buffer K = concurrency / 10, so that a
              version aggregates a tenth of the tasks in flight), 10 to 10,000, and FedCompass's
              silos (all in flight), 10 to 300 (`SILOS`).
  clients     FedAvg (cohort 100) and FedBuff (concurrency 100, K = 10) over 1,000 to 1,000,000
              clients, schedule only (`NoTrainingExecutor`: zero deltas aggregated, a 3-scalar
              model) and trained.
  model       the three algorithms (cohort / concurrency 100, FedCompass 20 silos) with the
              MLP's two hidden layers 20 to 2,000 wide (16k to 5.6M parameters).
  evaluation  per-client evaluation (`ClientEvaluator`, 10 test examples per client) and the
              central evaluator on as many examples, 10 to 100,000 clients (1M examples).

Every point runs in a fresh subprocess (`--point`), so its peak RSS (`getrusage`) is its own,
`--repeats` times; the minimum of each figure is kept. A point builds its federation (clients
hold 16-48 examples drawn from a shared pool of at most 50,000 examples, so a million clients
fit in memory), runs warm-up versions (compilation, and for the asynchronous algorithms a full
turn of the tasks in flight), then measures versions until `--min_seconds` have passed and, for
the asynchronous algorithms, as many client updates as there are tasks in flight: host seconds
per version exclude compilation (also any that comes after the warm-up, when a new task-count
or step bucket first appears: JAX's compile events are timed and subtracted, `compile_s`) and
the start-up transient. Tasks run 2 local steps of B = 16
(FedCompass: 2-6 steps). Evaluation points time one call after a warm-up call.

Prints one JSON line per point (and writes them to `--output`), then the fitted growth of each
series (`experiments/scaling/tables.py`). `--export` writes the result file that
docs/results/performance.md's scaling curves render (`experiments/results_docs.py`). `--profile` with `--point`
prints the measured phase's cProfile to stderr.
"""

from __future__ import annotations

import cProfile
import datetime
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.cli import FlagError, parse_list

CURVES = ('cohort', 'clients', 'model', 'evaluation')
ALGORITHMS = ('fedavg', 'fedbuff', 'fedcompass')

_CURVES = flags.DEFINE_string('curves', ','.join(CURVES), f'Comma list of {",".join(CURVES)}.')
_REDUCED = flags.DEFINE_bool('reduced', False, 'Few small points (about a minute).')
_REPEATS = flags.DEFINE_integer('repeats', None, 'Runs per point (default 2, 1 with --reduced).')
_MIN_SECONDS = flags.DEFINE_float(
  'min_seconds', None, 'Least measured seconds per point (default 1, 0.2 with --reduced).'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the JSON lines to this file.')
_EXPORT = flags.DEFINE_string(
  'export', None, 'Write the result file of the scaling curves (docs/results/data/scaling.json).'
)
_POINT = flags.DEFINE_string('point', None, 'Internal: measure this one point (JSON) here.')
_PROFILE = flags.DEFINE_bool('profile', False, 'With --point: cProfile the measured phase.')

IMAGE_SHAPE, NUM_CLASSES = (28, 28, 1), 10
POOL = 50_000  # training examples shared by the clients
MIN_SIZE, MAX_SIZE = 16, 48
LOCAL_STEPS, BATCH_SIZE = 2, 16
Q_MIN, Q_MAX = 2, 6  # FedCompass
TEST_EXAMPLES = 10  # per client, evaluation curve
DEFAULT_WIDTH = 200
# FedCompass keeps every silo in flight and its measurement needs a full turn of them: at about
# 30 ms per client update on 2 shared CPU cores, 10,000 silos would take over ten minutes.
SILOS = [10, 30, 100, 300]

FULL_SIZES = {
  'cohort': [10, 100, 1000, 10_000],
  'clients': [1000, 10_000, 100_000, 1_000_000],
  'model': [20, 200, 2000],
  'evaluation': [10, 1000, 10_000, 100_000],
}
REDUCED_SIZES = {
  'cohort': [10, 100],
  'clients': [1000, 100_000],
  'model': [20, 200],
  'evaluation': [10, 1000],
}


def points(curve: str, reduced: bool) -> list[dict[str, Any]]:
  """The points of `curve`: the settings one `--point` run measures."""
  sizes = (REDUCED_SIZES if reduced else FULL_SIZES)[curve]
  algorithms: tuple[str, ...]
  if curve == 'cohort':
    algorithms = ('fedavg', 'fedbuff') if reduced else ALGORITHMS
    return [
      dict(curve=curve, algorithm=a, size=n)
      for a in algorithms
      for n in (SILOS if a == 'fedcompass' else sizes)
    ]
  if curve == 'clients':
    modes = ('schedule',) if reduced else ('schedule', 'train')
    algorithms = ('fedbuff',) if reduced else ('fedavg', 'fedbuff')
    return [
      dict(curve=curve, algorithm=a, mode=m, size=n)
      for m in modes
      for a in algorithms
      for n in sizes
    ]
  if curve == 'model':
    algorithms = ('fedavg',) if reduced else ALGORITHMS
    return [dict(curve=curve, algorithm=a, width=w) for a in algorithms for w in sizes]
  return [dict(curve=curve, evaluator=e, size=n) for e in ('client', 'central') for n in sizes]


# ---- One point, in its own process ---------------------------------------------------------


def peak_rss_mb() -> float:
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / (1 << 20) if sys.platform == 'darwin' else peak / 1024


def federation(num_clients: int, seed: int = 0):
  """Clients of 16-48 examples drawn (with overlap) from a pool of at most `POOL` examples."""
  import numpy as np

  from fedsim_jax.data.federated import FederatedDataset

  rng = np.random.default_rng(seed)
  pool = min(POOL, num_clients * MAX_SIZE)
  y = rng.integers(0, NUM_CLASSES, pool + 10).astype(np.int32)
  x = rng.integers(0, 60, (pool + 10, *IMAGE_SHAPE), dtype=np.uint8)
  x.reshape(len(x), -1)[np.arange(len(x)), y] = 255
  return FederatedDataset(
    name='scaling',
    train_x=x[:pool],
    train_y=y[:pool],
    client_indices=rng.integers(0, pool, (num_clients, MAX_SIZE), dtype=np.int32),
    client_sizes=rng.integers(MIN_SIZE, MAX_SIZE + 1, num_clients).astype(np.int32),
    test_x=x[pool:],
    test_y=y[pool:],
    num_classes=NUM_CLASSES,
  )


def _shape(point: dict[str, Any]) -> dict[str, int]:
  """clients, cohort (FedAvg) or concurrency, FedBuff's K and the MLP width of a point."""
  curve, algorithm = point['curve'], point['algorithm']
  width = point.get('width', DEFAULT_WIDTH)
  if curve == 'cohort':
    work = point['size']
    clients = work if algorithm == 'fedcompass' else max(1000, 2 * work)
  elif curve == 'clients':
    work, clients = 100, point['size']
  else:
    work = 20 if algorithm == 'fedcompass' else 100
    clients = work if algorithm == 'fedcompass' else 1000
  return dict(clients=clients, work=work, buffer=max(1, work // 10), width=width)


def simulation(point: dict[str, Any]):
  """The `Simulation` of a cohort, clients or model point, and the model's parameter count."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  from fedsim_jax.algorithms.fedcompass import CompassScheduler, compass_aggregator
  from fedsim_jax.client.local_update import sgd_client_update
  from fedsim_jax.executor import Executor, NoTrainingExecutor
  from fedsim_jax.executor.choice import resolve_execution, resolve_threads
  from fedsim_jax.models import get_model
  from fedsim_jax.runtime import PerStepLatency, Simulation
  from fedsim_jax.strategy import (
    AsynchronousScheduler,
    LocalWork,
    SynchronousScheduler,
    count_mean,
    server_update,
  )

  shape = _shape(point)
  algorithm, clients = point['algorithm'], shape['clients']
  local_work = LocalWork(steps=LOCAL_STEPS, batch_size=BATCH_SIZE)
  if point.get('mode') == 'schedule':
    params: Any = {'w': jnp.zeros(3)}
    num_params = 3
    executor: Any = NoTrainingExecutor(params)
    client_sizes = np.random.default_rng(0).integers(MIN_SIZE, MAX_SIZE + 1, clients)
  else:
    fed = federation(clients)
    model = get_model('mlp', IMAGE_SHAPE, NUM_CLASSES, hidden_sizes=(shape['width'],) * 2)
    params = model.init(jax.random.PRNGKey(0))
    num_params = model.num_params(params)
    backend, step_loop = resolve_execution('auto', 'auto')
    executor = Executor(
      sgd_client_update(model, optax.sgd(0.05), BATCH_SIZE),
      fed.device_arrays(),
      jax.random.PRNGKey(1),
      backend=backend,
      step_loop=step_loop,
      threads=resolve_threads(0, backend),
    )
    client_sizes = fed.client_sizes
  if algorithm == 'fedavg':
    scheduler: Any = SynchronousScheduler(shape['work'], local_work)
    aggregator = server_update(optax.sgd(1.0), count_mean())
  elif algorithm == 'fedbuff':
    scheduler = AsynchronousScheduler(shape['work'], shape['buffer'], local_work)
    aggregator = server_update(optax.sgd(1.0), count_mean())
  else:
    scheduler = CompassScheduler(Q_MIN, Q_MAX)
    aggregator = compass_aggregator()
  step_mean = 0.15 if algorithm == 'fedcompass' else 1.0
  sim = Simulation(
    executor=executor,
    scheduler=scheduler,
    aggregator=aggregator,
    latency=PerStepLatency(
      clients, np.random.default_rng(2), mean=step_mean, distribution='normal', jitter=0.05
    ),
    init_params=params,
    client_sizes=client_sizes,
    rng=np.random.default_rng(3),
    deferred=True,
  )
  return sim, shape, num_params


_COMPILE_EVENTS = (
  '/jax/core/compile/jaxpr_trace_duration',
  '/jax/core/compile/jaxpr_to_mlir_module_duration',
  '/jax/core/compile/backend_compile_duration',
)


class CompileClock:
  """Seconds JAX spent tracing, lowering and compiling while `counting` (a new task-count or
  step bucket can first appear after the warm-up): subtracted from the measured time."""

  def __init__(self) -> None:
    import jax

    self.counting = False
    self.seconds = 0.0
    jax.monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
    if self.counting and event in _COMPILE_EVENTS:
      self.seconds += duration_secs


def _in_flight(point: dict[str, Any], shape: dict[str, int]) -> int:
  """Client updates of one turn of the tasks in flight (0 for FedAvg: each round is one)."""
  return 0 if point['algorithm'] == 'fedavg' else shape['work']


def measure_simulation(
  point: dict[str, Any], min_seconds: float, profile: cProfile.Profile | None
) -> dict[str, Any]:
  """Warm-up, then the measured versions of a simulated point (module docstring)."""
  import jax

  from fedsim_jax.runtime import StopCondition

  start = time.perf_counter()
  sim, shape, num_params = simulation(point)
  setup_s = time.perf_counter() - start
  turn = _in_flight(point, shape)

  def versions_until(min_updates: int, min_versions: int, seconds: float) -> tuple[int, int, float]:
    versions, updates = sim.version, sim.client_updates
    begin = time.perf_counter()
    while (
      sim.version - versions < min_versions
      or sim.client_updates - updates < min_updates
      or time.perf_counter() - begin < seconds
    ):
      sim.run(StopCondition(max_versions=sim.version + 1))
      jax.block_until_ready(sim.params)
    return sim.version - versions, sim.client_updates - updates, time.perf_counter() - begin

  _, _, warmup_s = versions_until(turn, 1, 0.0)
  clock = CompileClock()
  clock.counting = True
  if profile is not None:
    profile.enable()
  versions, updates, seconds = versions_until(turn, 2, min_seconds)
  if profile is not None:
    profile.disable()
  clock.counting = False
  return dict(
    clients=shape['clients'],
    concurrency=shape['work'],
    buffer_size=shape['buffer'] if point['algorithm'] == 'fedbuff' else None,
    width=None if point.get('mode') == 'schedule' else shape['width'],
    params=num_params,
    versions=versions,
    updates_per_version=round(updates / versions, 1),
    seconds=(seconds - clock.seconds) / versions,
    compile_s=round(clock.seconds, 3),
    setup_s=round(setup_s, 2),
    warmup_s=round(warmup_s, 2),
  )


def measure_evaluation(
  point: dict[str, Any], min_seconds: float, profile: cProfile.Profile | None
) -> dict[str, Any]:
  """One evaluation of `size` clients' 10 test examples each, after a warm-up call."""
  import jax
  import numpy as np

  from fedsim_jax.data.client_test import ClientTestSet
  from fedsim_jax.metrics import make_evaluator
  from fedsim_jax.metrics.client_evaluation import ClientEvaluator
  from fedsim_jax.models import get_model

  start = time.perf_counter()
  clients = point['size']
  rng = np.random.default_rng(0)
  count = clients * TEST_EXAMPLES
  y = rng.integers(0, NUM_CLASSES, count).astype(np.int32)
  x = rng.integers(0, 60, (count, *IMAGE_SHAPE), dtype=np.uint8)
  offsets = np.arange(0, count + 1, TEST_EXAMPLES, dtype=np.int64)
  model = get_model('mlp', IMAGE_SHAPE, NUM_CLASSES)
  params = model.init(jax.random.PRNGKey(0))
  if point['evaluator'] == 'client':
    evaluator = ClientEvaluator(model, ClientTestSet(x, y, offsets, 'scaling'))

    def call() -> None:
      evaluator(params, 0)
  else:
    central = make_evaluator(model, x, y)

    def call() -> None:
      jax.block_until_ready(central(params))

  setup_s = time.perf_counter() - start
  start = time.perf_counter()
  call()
  warmup_s = time.perf_counter() - start
  times: list[float] = []
  clock = CompileClock()
  if profile is not None:
    profile.enable()
  while not times or sum(times) < min_seconds:
    clock.counting, clock.seconds = True, 0.0
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start - clock.seconds)
  if profile is not None:
    profile.disable()
  return dict(
    clients=clients,
    examples=count,
    params=model.num_params(params),
    calls=len(times),
    seconds=min(times),
    setup_s=round(setup_s, 2),
    warmup_s=round(warmup_s, 2),
  )


def measure_point(point: dict[str, Any], min_seconds: float, profile: bool) -> dict[str, Any]:
  """The figures of one point, measured in this process."""
  profiler = cProfile.Profile() if profile else None
  start = time.perf_counter()
  if point['curve'] == 'evaluation':
    figures = measure_evaluation(point, min_seconds, profiler)
  else:
    figures = measure_simulation(point, min_seconds, profiler)
  if profiler is not None:
    pstats.Stats(profiler, stream=sys.stderr).sort_stats('cumulative').print_stats(30)
  return dict(
    figures, peak_rss_mb=round(peak_rss_mb(), 1), host_seconds=time.perf_counter() - start
  )


# ---- The driver ----------------------------------------------------------------------------


def series_of(point: dict[str, Any]) -> str:
  if point['curve'] == 'evaluation':
    return point['evaluator']
  if point['curve'] == 'clients':
    return f'{point["algorithm"]}/{point["mode"]}'
  return point['algorithm']


def run_point(point: dict[str, Any], repeats: int, min_seconds: float) -> dict[str, Any]:
  """`point` measured `repeats` times, each in a fresh subprocess; the minimum of each time and
  of the peak RSS, the record of `experiments/scaling/tables.py`."""
  from fedsim_jax.provenance import code_version

  runs = []
  for _ in range(repeats):
    result = subprocess.run(
      [
        sys.executable,
        os.path.abspath(__file__),
        f'--point={json.dumps(point)}',
        f'--min_seconds={min_seconds}',
      ],
      capture_output=True,
      text=True,
    )
    if result.returncode != 0:
      tail = (result.stderr.strip().splitlines() or ['no output'])[-1]
      cli.fail(f'point {json.dumps(point)} failed: {tail}')
    runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
  best = min(runs, key=lambda r: r['seconds'])
  size = best['params'] if point['curve'] == 'model' else point['size']
  record = dict(curve=point['curve'], series=series_of(point), size=size)
  record.update({k: v for k, v in best.items() if v is not None})
  record['seconds'] = float(f'{best["seconds"]:.4g}')
  record['seconds_repeats'] = [float(f'{r["seconds"]:.4g}') for r in runs]
  record['peak_rss_mb'] = min(r['peak_rss_mb'] for r in runs)
  record['host_seconds'] = round(sum(r['host_seconds'] for r in runs), 1)
  record['finished'] = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
  record['code'] = code_version()
  return record


def settings(repeats: int, min_seconds: float) -> dict[str, Any]:
  import jax

  return {
    'machine': f'{os.cpu_count()} CPU cores, {platform.machine()}, {jax.default_backend()}',
    'jax': jax.__version__,
    'model': f'MLP 784-{DEFAULT_WIDTH}-{DEFAULT_WIDTH}-10 unless the curve varies the width',
    'local_work': f'{LOCAL_STEPS} steps x B={BATCH_SIZE} (FedCompass: {Q_MIN}-{Q_MAX} steps)',
    'client_examples': f'{MIN_SIZE}-{MAX_SIZE} from a shared pool of at most {POOL:,}',
    'repeats': f'{repeats} per point, each in a fresh process; the minimum is kept',
    'min_measured_seconds': min_seconds,
  }


def _summary(records: list[dict[str, Any]]) -> str:
  from experiments.scaling import tables

  curves = {r['curve'] for r in records}
  enough = [
    r
    for r in records
    if sum(s['series'] == r['series'] and s['curve'] == r['curve'] for s in records) >= 3
  ]
  parts = [tables.curve_table(records, c) for c in CURVES if c in curves]
  if enough:
    parts.append(tables.growth_table(enough))
  return '\n\n'.join(parts)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  min_seconds = _MIN_SECONDS.value
  if min_seconds is not None and not 0 <= min_seconds < 600:
    cli.fail(f'--min_seconds={min_seconds}; allowed: 0 <= seconds < 600')
  cli.quiet_logging()
  if _POINT.value is not None:
    try:
      point = json.loads(_POINT.value)
    except ValueError as error:
      cli.fail(f'--point={_POINT.value!r} is not JSON ({error})')
    print(json.dumps(measure_point(point, min_seconds or 0.0, _PROFILE.value)))
    return
  try:
    curves = parse_list('curves', _CURVES.value, str, lambda c: c in CURVES, ','.join(CURVES))
  except FlagError as error:
    cli.fail(str(error))
  if not curves:
    cli.fail(f'--curves is empty; allowed values: {",".join(CURVES)}')
  reduced = _REDUCED.value
  repeats = _REPEATS.value if _REPEATS.value is not None else 1 if reduced else 2
  if repeats < 1:
    cli.fail(f'--repeats={repeats}; allowed: an integer >= 1')
  if min_seconds is None:
    min_seconds = 0.2 if reduced else 1.0
  from experiments import results_data

  output = None
  try:
    if _EXPORT.value:
      results_data.prepare_path(_EXPORT.value)
    if _OUTPUT.value:
      os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
      output = open(_OUTPUT.value, 'w', encoding='utf-8')
  except results_data.ResultsDataError as error:
    cli.fail(str(error))
  except OSError as error:
    cli.fail(f'--output={_OUTPUT.value}: {error.strerror or error}')
  records = []
  try:
    for curve in curves:
      for point in points(curve, reduced):
        record = run_point(point, repeats, min_seconds)
        records.append(record)
        line = json.dumps(record)
        print(line, flush=True)
        if output is not None:
          output.write(line + '\n')
          output.flush()
  finally:
    if output is not None:
      output.close()
  print()
  print(_summary(records))
  if _EXPORT.value:
    results_data.export(
      _EXPORT.value,
      'scaling',
      records,
      settings(repeats, min_seconds),
      results_data.command_line(sys.argv),
    )
    print(f'exported: {_EXPORT.value} ({len(records)} points)')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
