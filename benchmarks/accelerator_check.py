"""The one check run first on a lent accelerator: which backend wins there, what batching runs
buys, and the FedJAX-comparable workload.

  .venv/bin/python benchmarks/accelerator_check.py [--output=accelerator.md]
  .venv/bin/python benchmarks/accelerator_check.py --reduced        # tiny sizes: a smoke test

On a GPU machine without a package index: benchmarks/README.md (the wheels it needs there and
the one command).

Runs on whatever devices JAX sees (GPU, TPU or CPU), synthetic data only (no prepared data, no
download), these cases (`--cases`), in this order:

  backends     the benchmark harness's training cases (`harness_lib`: sync FedAvg with the MLP
               and with the MNIST CNN, FedBuff and FedCompass with the MLP) with fedsim's vmap
               and loop backends (on CPU also the host-driven step loop for the CNN), and the
               sync cases' centralized roofline.
  emnist       FedAvg on an EMNIST-shaped federation (3,400 clients of 28x28x1 images, 62
               classes, 50 to 345 examples each: EMNIST-62's 671k examples in mean), the EMNIST
               CNN (Reddi et al.), 10 clients per round, one local epoch of batch 20, 1,500
               rounds, vmap and loop. FedJAX reports "a few minutes" for this on a TPU; the target
               on one H100 is under one minute. Rounds run until `--max_seconds` (or the budget)
               have passed; the time of all 1,500 rounds is projected from the steady per-round
               time after the first (compiling) round.
  seeds        several seeds of one FedAvg run (MLP, `run_experiment` with its outputs),
               sequential against one `run_experiments_lockstep` sweep.
  hyperparams  configs differing only in the client learning rate, likewise; recorded as
               `unsupported`, with the refusal's message, where `run_experiments_lockstep`
               refuses such a sweep.
  devices      the same FedAvg run on one device and sharded over all of them
               (`executor.devices`); `n/a` with one accelerator. On a one-device CPU it is run in a
               child process with `--cpu_devices` forced host devices (the figures then measure
               nothing but the code path).

`--budget_seconds` bounds the whole check: the EMNIST rounds stop at the deadline, and a case
that would start after it is recorded as skipped. Every record is printed as a JSON line, and
with `--output=X.md` appended to `X.jsonl` and the markdown table (headed by the device)
rewritten to `X.md` after each record, so a check cut off still leaves its table so far.
Exits 1 when a case failed (its record says how), 2 on invalid flags.

`--reduced` runs every case at tiny sizes (about a minute on 2 CPU cores): the backends case
with the two sync cases only and no roofline, the EMNIST workload with the MLP (a convolution
inside a loop is slow on XLA:CPU), vmap and loop only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.cli import FlagError, parse_list

CASES = ('backends', 'emnist', 'seeds', 'hyperparams', 'devices')

_REDUCED = flags.DEFINE_bool('reduced', False, 'Tiny sizes (smoke test); the figures mean nothing.')
_OUTPUT = flags.DEFINE_string(
  'output', None, 'Write the markdown table to this file and the JSON lines next to it (.jsonl).'
)
_CASES = flags.DEFINE_string(
  'cases', ','.join(CASES), f'Comma list of cases to run; allowed: {",".join(CASES)}.'
)
_BUDGET_SECONDS = flags.DEFINE_float(
  'budget_seconds', 360.0, 'Host seconds the whole check may take (JAX start-up excluded).'
)
_MAX_SECONDS = flags.DEFINE_float(
  'max_seconds', 45.0, 'Host seconds the EMNIST workload may run per backend (then projected).'
)
_CASE_SECONDS = flags.DEFINE_float(
  'case_seconds', 8.0, "Measured seconds per backend in the harness's synchronous cases."
)
_CPU_DEVICES = flags.DEFINE_integer(
  'cpu_devices', 4, 'Forced host devices of the devices case on a one-device CPU (0: skip it).'
)

# Executor strategies (`harness_lib.FEDSIM_EXECUTORS`) compared; on CPU (full sizes) the CNN
# cases also run host-driven steps, which `backend='auto'` picks there for convolutional models.
BACKEND_CASES = ('sync_mlp', 'sync_cnn', 'fedbuff_mlp', 'compass_mlp')
REDUCED_BACKEND_CASES = ('sync_mlp', 'sync_cnn')  # the smoke test's: the MLP and the CNN
STRATEGIES = ('fedsim_vmap', 'fedsim_loop')
CPU_CNN_STRATEGIES = ('fedsim_loop_host',)
CNN_CASES = ('sync_cnn', 'emnist_fedavg')
# Seconds a case needs left in the budget to start (full sizes; reduced runs start anyway).
MIN_CASE_SECONDS = 20.0


@dataclasses.dataclass(frozen=True)
class EmnistWorkload:
  """FedJAX's EMNIST FedAvg benchmark, on synthetic data of the real shapes."""

  num_clients: int = 3400
  min_size: int = 50
  max_size: int = 345
  clients_per_round: int = 10
  epochs: float = 1.0
  batch_size: int = 20
  rounds: int = 1500
  model: str = 'emnist_cnn'


@dataclasses.dataclass(frozen=True)
class RunsWorkload:
  """FedAvg runs with their outputs (`run_experiment`) on a synthetic 28x28x1, 10-class
  federation: the seeds, hyperparams and devices cases. `runs` seeds or learning rates."""

  num_clients: int = 200
  min_size: int = 64
  max_size: int = 256
  cohort_size: int = 20
  local_steps: int = 10
  batch_size: int = 32
  rounds: int = 30
  runs: int = 8
  model: str = 'mlp'


# Reduced: the MLP, since a convolutional step inside a loop is slow on XLA:CPU (about 1.5 s
# for the EMNIST CNN's), and the smoke test checks the workload's machinery, not the model.
REDUCED_EMNIST = EmnistWorkload(
  num_clients=34, min_size=8, max_size=16, clients_per_round=4, rounds=2, model='mlp'
)
REDUCED_RUNS = RunsWorkload(
  num_clients=8, min_size=8, max_size=16, cohort_size=4, local_steps=2, batch_size=8, rounds=2,
  runs=2,
)  # fmt: skip


class Budget:
  """The check's deadline: seconds left, and whether a case may still start."""

  def __init__(self, seconds: float, reduced: bool):
    self.deadline = time.perf_counter() + seconds
    self.min_case_seconds = 0.0 if reduced else MIN_CASE_SECONDS

  def left(self) -> float:
    return max(self.deadline - time.perf_counter(), 0.0)

  def allows_case(self) -> bool:
    return self.left() > self.min_case_seconds if self.min_case_seconds else self.left() > 0


def device_name() -> str:
  import jax

  device = jax.devices()[0]
  return f'{jax.device_count()} x {device.platform.upper()} {device.device_kind}'


def on_cpu() -> bool:
  import jax

  return jax.devices()[0].platform == 'cpu'


def strategies(case: str, reduced: bool) -> tuple[str, ...]:
  """The executor strategies `case` compares: vmap and loop, and with full sizes on CPU the
  host-driven step loop for the CNN cases."""
  cpu_cnn = on_cpu() and not reduced and case in CNN_CASES
  return STRATEGIES + (CPU_CNN_STRATEGIES if cpu_cnn else ())


# ---- backends: the harness's cases ---------------------------------------------------------


def backend_records(reduced: bool, case_seconds: float, budget: Budget) -> Iterator[dict]:
  """The harness's training cases with the vmap and loop executors (and, with full sizes, the
  sync cases' roofline), each case skipped when the budget is spent. Reduced: the two sync
  cases only, without the roofline."""
  import harness_lib  # next to this script

  sizes = harness_lib.QUICK_SIZES if reduced else harness_lib.FULL_SIZES
  for case in REDUCED_BACKEND_CASES if reduced else BACKEND_CASES:
    if not budget.allows_case():
      yield skipped(case, budget)
      continue
    compared = strategies(case, reduced)
    if case in harness_lib.SYNC_STRATEGIES:
      case_sizes = dataclasses.replace(sizes[case], min_seconds=0.0 if reduced else case_seconds)
      roofline = () if reduced else ('roofline',)
      yield from harness_lib.sync_case(case, case_sizes, compared + roofline)
    elif case == 'fedbuff_mlp':
      yield from harness_lib.fedbuff_case(case, sizes[case], compared)
    else:
      yield from harness_lib.compass_case(case, sizes[case], compared)


# ---- emnist: the FedJAX-comparable workload ------------------------------------------------


def emnist_fedavg(
  strategy: str, workload: EmnistWorkload, max_seconds: float, budget: Budget, fed: Any
) -> dict[str, Any]:
  """FedAvg rounds of `workload` with the harness's `strategy` executor, until `max_seconds`
  or the budget's deadline; times and the projection to `workload.rounds`."""
  import harness_lib  # next to this script
  import jax
  import optax

  from fedsim_jax.client.local_update import sgd_client_update
  from fedsim_jax.models import get_model
  from fedsim_jax.runtime import StopCondition
  from fedsim_jax.strategy import LocalWork

  model = get_model(workload.model, fed.input_shape, fed.num_classes)
  update = sgd_client_update(model, optax.sgd(0.1), workload.batch_size)
  executor = harness_lib.fedsim_executor(strategy, update, fed)
  sim = harness_lib.fedavg_simulation(
    executor,
    fed,
    model,
    workload.clients_per_round,
    LocalWork(epochs=workload.epochs, batch_size=workload.batch_size),
    seeds=(0, 1),
  )

  def one_round() -> float:
    start = time.perf_counter()
    sim.run(StopCondition(max_versions=sim.version + 1))
    jax.block_until_ready(sim.params)
    return time.perf_counter() - start

  first = one_round()  # compiles
  stop = time.perf_counter() + min(max_seconds, budget.left())
  times: list[float] = []
  while sim.version < workload.rounds and (not times or time.perf_counter() < stop):
    times.append(one_round())
  steady = sum(times) / len(times) if times else first
  return {
    'case': 'emnist_fedavg',
    'strategy': strategy,
    'rounds_measured': 1 + len(times),
    'first_round_s': round(first, 3),
    'round_s': round(steady, 4),
    'projected_s': round(first + steady * (workload.rounds - 1), 1),
    'rounds': workload.rounds,
    'examples_per_s': round(sim.gradient_steps * workload.batch_size / (first + sum(times)), 1),
    'programs': executor.num_compiled_programs,
    'setting': (
      f'{workload.model}, {workload.clients_per_round} of {workload.num_clients} clients/round '
      f'({workload.min_size}-{workload.max_size} examples of 28x28x1, 62 classes) x '
      f'{workload.epochs:g} epoch x B={workload.batch_size}, {workload.rounds} rounds'
    ),
  }


def emnist_records(reduced: bool, max_seconds: float, budget: Budget) -> Iterator[dict]:
  from fedsim_jax.data.synthetic import toy_federation

  workload = REDUCED_EMNIST if reduced else EmnistWorkload()
  compared = strategies('emnist_fedavg', reduced)
  if not budget.allows_case():
    yield from (skipped('emnist_fedavg', budget, strategy) for strategy in compared)
    return
  fed = toy_federation(
    num_clients=workload.num_clients,
    num_classes=62,
    image_shape=(28, 28, 1),
    min_size=workload.min_size,
    max_size=workload.max_size,
    num_test=10,
  )
  for i, strategy in enumerate(compared):
    # Each backend gets at most its share of the budget left; at least its compiling round.
    share = Budget(budget.left() / (len(compared) - i), reduced)
    yield emnist_fedavg(strategy, workload, max_seconds, share, fed)


# ---- seeds and hyperparams: batched runs ---------------------------------------------------


def fedavg_config(
  workload: RunsWorkload, *, seed: int = 0, learning_rate: float = 0.05, **executor
):
  """FedAvg on the synthetic federation (given to the run), evaluated at its end only."""
  from fedsim_jax.config import base_config

  config = base_config()
  config.seed = seed
  config.data.num_clients = workload.num_clients
  config.model.name = workload.model
  config.algorithm.kwargs.cohort_size = workload.cohort_size
  config.client.local_steps = workload.local_steps
  config.client.batch_size = workload.batch_size
  config.client.learning_rate = learning_rate
  config.run.num_rounds = workload.rounds
  config.run.eval_every = workload.rounds
  config.run.tensorboard = False  # an optional writer; not what is measured
  config.executor.update(executor)
  return config


def runs_federation(workload: RunsWorkload) -> Any:
  from fedsim_jax.data.synthetic import toy_federation

  return toy_federation(
    num_clients=workload.num_clients,
    num_classes=10,
    image_shape=(28, 28, 1),
    min_size=workload.min_size,
    max_size=workload.max_size,
    num_test=500,
  )


def _metrics(workdir: str) -> str:
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    return f.read()


def lockstep_record(
  case: str, configs: list[Any], workload: RunsWorkload, budget: Budget, **extra: Any
) -> dict[str, Any]:
  """`configs` run together (`run_experiments_lockstep`), then one after another
  (`run_experiment`): host seconds, speed-up, identical metrics. A warm-up run of the first
  config compiles the programs both sides share; the sweep's own (larger) programs are compiled
  in its time. `unsupported`, with the refusal's message, when `run_experiments_lockstep`
  refuses the configs (it does before it writes anything)."""
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep
  from fedsim_jax.settings import ConfigError

  record: dict[str, Any] = {'case': case, 'strategy': 'lockstep', 'runs': len(configs), **extra}
  fed = runs_federation(workload)
  with tempfile.TemporaryDirectory() as root:
    lock_dirs = [os.path.join(root, f'lock{i}') for i in range(len(configs))]
    seq_dirs = [os.path.join(root, f'seq{i}') for i in range(len(configs))]
    start = time.perf_counter()
    run_experiment(configs[0], os.path.join(root, 'warmup'), dataset=fed)
    # The warm-up's time (compiling included) bounds each sequential run's and the sweep's.
    need = (time.perf_counter() - start) * (1 + len(configs))
    if need > budget.left():
      return {**record, 'status': f'skipped: needs about {need:.0f} s, {budget.left():.0f} s left'}
    start = time.perf_counter()
    try:  # refused before anything is written: configs it cannot run together
      summaries = run_experiments_lockstep(configs, lock_dirs, datasets=[fed] * len(configs))
    except ConfigError as error:
      return {**record, 'status': f'unsupported: {error}'}
    lockstep = time.perf_counter() - start
    start = time.perf_counter()
    for config, workdir in zip(configs, seq_dirs):
      run_experiment(config, workdir, dataset=fed)
    sequential = time.perf_counter() - start
    identical = all(_metrics(s) == _metrics(lk) for s, lk in zip(seq_dirs, lock_dirs))
  info = summaries[0]['host'].get('lockstep', {})
  return {
    **record,
    'status': 'measured',
    'sequential_s': round(sequential, 2),
    'lockstep_s': round(lockstep, 2),
    'speedup': round(sequential / max(lockstep, 1e-9), 2),
    'execution': info.get('execution'),
    'mean_shared_batch_size': info.get('mean_shared_batch_size'),
    'identical_metrics': identical,
    'setting': _runs_setting(workload),
  }


def _runs_setting(workload: RunsWorkload) -> str:
  return (
    f'FedAvg, {workload.model}, {workload.cohort_size} of {workload.num_clients} clients x '
    f'{workload.local_steps} steps x B={workload.batch_size}, {workload.rounds} rounds'
  )


def learning_rates(count: int) -> list[float]:
  """`count` client learning rates, halving from 0.1."""
  return [0.1 / 2**i for i in range(count)]


def seeds_records(reduced: bool, budget: Budget) -> Iterator[dict]:
  workload = REDUCED_RUNS if reduced else RunsWorkload()
  if not budget.allows_case():
    yield skipped('seeds', budget, 'lockstep')
    return
  configs = [fedavg_config(workload, seed=s) for s in range(workload.runs)]
  yield lockstep_record('seeds', configs, workload, budget)


def hyperparams_records(reduced: bool, budget: Budget) -> Iterator[dict]:
  workload = REDUCED_RUNS if reduced else RunsWorkload()
  if not budget.allows_case():
    yield skipped('hyperparams', budget, 'lockstep')
    return
  rates = learning_rates(workload.runs)
  configs = [fedavg_config(workload, learning_rate=lr) for lr in rates]
  yield lockstep_record('hyperparams', configs, workload, budget, learning_rates=rates)


# ---- devices: one against several ----------------------------------------------------------


def devices_records(
  reduced: bool, budget: Budget, cpu_devices: int, run_child: Callable[[int], list[dict]]
) -> Iterator[dict]:
  """The FedAvg run on one device and sharded over all of them; with one CPU device, the same
  in a child process with `cpu_devices` forced host devices (`run_child`)."""
  import jax

  count = jax.device_count()
  if not budget.allows_case():
    yield skipped('devices', budget, 'several')
    return
  if count == 1:
    if on_cpu() and cpu_devices > 1:
      yield from run_child(cpu_devices)
    else:
      yield {'case': 'devices', 'strategy': 'several', 'status': 'n/a: one device'}
    return
  workload = REDUCED_RUNS if reduced else RunsWorkload()
  # The cohort a multiple of the devices, so that the task axis splits evenly.
  workload = dataclasses.replace(workload, cohort_size=-(-workload.cohort_size // count) * count)
  fed = runs_federation(workload)
  for devices in (1, count):
    if not budget.allows_case():
      yield skipped('devices', budget, devices_label(devices))
      continue
    yield sharded_run(workload, fed, devices)


def devices_label(devices: int) -> str:
  return f'{devices} device{"s" if devices > 1 else ""}'


def sharded_run(workload: RunsWorkload, fed: Any, devices: int) -> dict[str, Any]:
  """The FedAvg run with `executor.devices=devices` (vmap), timed the second time (the first
  compiles)."""
  from fedsim_jax.experiment import run_experiment

  config = fedavg_config(workload, backend='vmap', devices=devices)
  with tempfile.TemporaryDirectory() as root:
    run_experiment(config, os.path.join(root, 'warmup'), dataset=fed)
    start = time.perf_counter()
    summary = run_experiment(config, os.path.join(root, 'run'), dataset=fed)
    seconds = time.perf_counter() - start
  return {
    'case': 'devices',
    'strategy': devices_label(devices),
    'status': 'measured',
    'examples_per_s': round(summary['host']['client_examples_per_second'], 1),
    'run_s': round(seconds, 2),
    'final_loss': summary.get('final_loss'),
    'final_accuracy': summary.get('final_accuracy'),
    'setting': _runs_setting(workload),
  }


def child_devices_records(devices: int, reduced: bool, budget: Budget) -> list[dict]:
  """This check's devices case in a child process with `devices` forced host devices."""
  env = {k: v for k, v in os.environ.items() if k not in ('PJRT_NPROC', 'NPROC')}
  flags_ = env.get('XLA_FLAGS', '')
  env.update(
    XLA_FLAGS=f'{flags_} --xla_force_host_platform_device_count={devices}'.strip(),
    JAX_PLATFORMS='cpu',
    PJRT_NPROC=str(2 * devices),  # fedsim_jax.executor.cpu_pool: a launch and a collective each
  )
  command = [
    sys.executable,
    os.path.abspath(__file__),
    '--cases=devices',
    '--cpu_devices=0',
    f'--budget_seconds={max(budget.left(), 1.0):.0f}',
    f'--reduced={str(reduced).lower()}',
  ]
  result = subprocess.run(
    command, env=env, capture_output=True, text=True, timeout=max(budget.left(), 1.0) + 120
  )
  records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
  if result.returncode != 0 and not records:
    tail = (result.stderr.strip().splitlines() or ['no output'])[-1]
    records = [{'case': 'devices', 'strategy': devices_label(devices), 'status': f'error: {tail}'}]
  return records


# ---- records and the report ----------------------------------------------------------------


def skipped(case: str, budget: Budget, strategy: str = '-') -> dict[str, Any]:
  return {
    'case': case,
    'strategy': strategy,
    'status': f'skipped: budget spent ({budget.left():.0f} s left)',
  }


def _cell(value: Any) -> str:
  if value is None:
    return '-'
  if isinstance(value, float):
    return f'{value:,.0f}' if abs(value) >= 100 else f'{value:.3g}'
  return f'{value:,}' if isinstance(value, int) and not isinstance(value, bool) else str(value)


SECTIONS: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...] = (
  (
    'Backends (the harness cases)',
    BACKEND_CASES,
    (
      ('case', 'case'),
      ('strategy', 'strategy'),
      ('examples/s', 'examples_per_s'),
      ('updates/s', 'updates_per_s'),
      ('compile s', 'compile_s'),
      ('programs', 'programs'),
      ('status', 'status'),
    ),
  ),
  (
    'EMNIST FedAvg (FedJAX comparison)',
    ('emnist_fedavg',),
    (
      ('strategy', 'strategy'),
      ('examples/s', 'examples_per_s'),
      ('first round s', 'first_round_s'),
      ('round s (steady)', 'round_s'),
      ('rounds measured', 'rounds_measured'),
      ('all rounds s (projected)', 'projected_s'),
      ('programs', 'programs'),
      ('status', 'status'),
    ),
  ),
  (
    'Batched runs (run_experiments_lockstep)',
    ('seeds', 'hyperparams'),
    (
      ('case', 'case'),
      ('runs', 'runs'),
      ('sequential s', 'sequential_s'),
      ('lockstep s', 'lockstep_s'),
      ('speed-up', 'speedup'),
      ('execution', 'execution'),
      ('mean shared batch', 'mean_shared_batch_size'),
      ('identical metrics', 'identical_metrics'),
      ('status', 'status'),
    ),
  ),
  (
    'Devices (executor.devices)',
    ('devices',),
    (
      ('strategy', 'strategy'),
      ('device', 'device'),
      ('examples/s', 'examples_per_s'),
      ('run s', 'run_s'),
      ('final loss', 'final_loss'),
      ('status', 'status'),
    ),
  ),
)


def markdown(header: str, records: list[dict[str, Any]], reduced: bool) -> str:
  """The records so far as one table per section, headed by `header` (the device)."""
  lines = [header]
  if reduced:
    lines.append('\nReduced sizes (smoke test): the figures mean nothing.')
  for title, cases, columns in SECTIONS:
    rows = [r for r in records if r['case'] in cases]
    if not rows:
      continue
    lines += ['', f'**{title}**', '']
    lines.append('| ' + ' | '.join(name for name, _ in columns) + ' |')
    lines.append('|' + '|'.join('---' for _ in columns) + '|')
    for r in rows:
      lines.append('| ' + ' | '.join(_cell(r.get(key)) for _, key in columns) + ' |')
  settings = dict.fromkeys(f'{r["case"]}: {r["setting"]}' for r in records if r.get('setting'))
  if settings:
    lines += [''] + [f'- {setting}' for setting in settings]
  return '\n'.join(lines)


class Report:
  """Prints each record as a JSON line and, given `output`, appends it to `<output>.jsonl` and
  rewrites the markdown table at `output` (atomically), so the table so far is always there."""

  def __init__(self, header: str, device: str, reduced: bool, output: str | None):
    self.header, self.device, self.reduced = header, device, reduced
    self.records: list[dict[str, Any]] = []
    self.output = output
    self.jsonl = os.path.splitext(output)[0] + '.jsonl' if output else None
    if self.jsonl:
      open(self.jsonl, 'w', encoding='utf-8').close()
      self._write_table()

  def emit(self, record: dict[str, Any]) -> None:
    record = {'device': self.device, **record}
    self.records.append(record)
    line = json.dumps(record)
    print(line, flush=True)
    if self.jsonl:
      with open(self.jsonl, 'a', encoding='utf-8') as f:
        f.write(line + '\n')
      self._write_table()

  def table(self) -> str:
    return markdown(self.header, self.records, self.reduced)

  def _write_table(self) -> None:
    assert self.output is not None
    partial = self.output + '.tmp'
    with open(partial, 'w', encoding='utf-8') as f:
      f.write(self.table() + '\n')
    os.replace(partial, self.output)


def run_case(case: str, report: Report, budget: Budget) -> bool:
  """Emits `case`'s records; a case that raises is recorded as an error (the others still
  run). Returns whether it completed."""
  reduced = _REDUCED.value
  cases: dict[str, Callable[[], Iterator[dict]]] = {
    'backends': lambda: backend_records(reduced, _CASE_SECONDS.value, budget),
    'emnist': lambda: emnist_records(reduced, _MAX_SECONDS.value, budget),
    'seeds': lambda: seeds_records(reduced, budget),
    'hyperparams': lambda: hyperparams_records(reduced, budget),
    'devices': lambda: devices_records(
      reduced,
      budget,
      _CPU_DEVICES.value,
      lambda n: child_devices_records(n, reduced, budget),
    ),
  }
  try:
    for record in cases[case]():
      report.emit(record)
  except Exception as error:  # noqa: BLE001 - one case's failure must not lose the others
    message = str(error).strip().splitlines()[0] if str(error).strip() else ''
    report.emit(
      {'case': case, 'strategy': '-', 'status': f'error: {type(error).__name__}: {message}'}
    )
    return False
  return True


def _checked_flags() -> list[str]:
  try:
    cases = parse_list('cases', _CASES.value, str, lambda c: c in CASES, ','.join(CASES))
  except FlagError as error:
    cli.fail(str(error))
  if not cases:
    cli.fail(f'--cases is empty; allowed values: {",".join(CASES)}')
  for flag in (_BUDGET_SECONDS, _MAX_SECONDS, _CASE_SECONDS, _CPU_DEVICES):
    if flag.value < 0:
      cli.fail(f'--{flag.name}={flag.value}: must be >= 0')
  if _OUTPUT.value:
    try:
      os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
    except OSError as error:
      cli.fail(f'--output={_OUTPUT.value}: {error.strerror or error}')
  return cases


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  cases = _checked_flags()
  cli.quiet_logging()
  import jax  # deferred: JAX start-up after the flag checks

  device = device_name()
  budget = Budget(_BUDGET_SECONDS.value, _REDUCED.value)
  header = f'Device: {device} (JAX {jax.__version__}, budget {_BUDGET_SECONDS.value:.0f} s)'
  report = Report(header, device, _REDUCED.value, _OUTPUT.value)
  failed = [case for case in cases if not run_case(case, report, budget)]
  print()
  print(report.table())
  sys.stdout.flush()
  if failed:
    print(f'error: cases failed: {",".join(failed)} (see their records)', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
