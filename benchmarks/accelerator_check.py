"""Which executor backend wins on the accelerator at hand: the evidence behind `backend='auto'`.

  .venv/bin/python benchmarks/accelerator_check.py [--output=accelerator.md]
  .venv/bin/python benchmarks/accelerator_check.py --reduced        # tiny sizes: a smoke test

Runs, on whatever device JAX sees first (GPU, TPU or CPU):

- the benchmark harness's training cases (`harness_lib`: sync MLP and CNN, FedBuff, FedCompass)
  with fedsim's vmap and loop backends;
- a FedJAX-comparable workload: FedAvg on an EMNIST-shaped federation (3,400 clients of 28x28x1
  images, 62 classes, 50 to 345 examples each: EMNIST-62's 671k examples in mean), the EMNIST
  CNN (Reddi et al.), 10 clients per round, one local epoch of batch 20, 1,500 rounds, on
  synthetic data of the real shapes (no download). FedJAX reports "a few minutes" for this on
  a TPU; the target on one H100 is under one minute. Rounds run until `--max_seconds` have
  passed (all 1,500 when they fit); the time of 1,500 rounds is projected from the steady
  per-round time after the first (compiling) round.

Prints one JSON line per record and a markdown table headed by the device, which
`docs/results/performance.md` keeps for each accelerator measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

from absl import app, flags

from fedsim_jax import cli

_REDUCED = flags.DEFINE_bool('reduced', False, 'Tiny sizes (smoke test); the figures mean nothing.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the markdown table to this file.')
_MAX_SECONDS = flags.DEFINE_float(
  'max_seconds', 300.0, 'Host seconds the EMNIST workload may run per backend (then projected).'
)
_HARNESS = flags.DEFINE_bool('harness', True, "Also run the harness's training cases.")

HARNESS_CASES = ('sync_mlp', 'sync_cnn', 'fedbuff_mlp', 'compass_mlp')
# The harness's executor strategies compared; on CPU also the host-driven step loop, which
# `backend='auto'` picks there for convolutional models.
STRATEGIES = ('fedsim_vmap', 'fedsim_loop')
CPU_STRATEGIES = ('fedsim_loop_host',)


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


REDUCED_EMNIST = EmnistWorkload(
  num_clients=34, min_size=8, max_size=16, clients_per_round=4, rounds=2
)


def device_name() -> str:
  import jax

  device = jax.devices()[0]
  return f'{jax.device_count()} x {device.platform.upper()} {device.device_kind}'


def strategies() -> tuple[str, ...]:
  import jax

  on_cpu = jax.devices()[0].platform == 'cpu'
  return STRATEGIES + (CPU_STRATEGIES if on_cpu else ())


def emnist_fedavg(strategy: str, workload: EmnistWorkload, max_seconds: float) -> dict[str, Any]:
  """FedAvg rounds of `workload` with the harness's `strategy` executor; times and the
  projection to `workload.rounds`."""
  import harness_lib  # next to this script
  import jax
  import optax

  from fedsim_jax.client.local_update import sgd_client_update
  from fedsim_jax.data.synthetic import toy_federation
  from fedsim_jax.models import get_model
  from fedsim_jax.runtime import StopCondition
  from fedsim_jax.strategy import LocalWork

  fed = toy_federation(
    num_clients=workload.num_clients,
    num_classes=62,
    image_shape=(28, 28, 1),
    min_size=workload.min_size,
    max_size=workload.max_size,
    num_test=10,
  )
  model = get_model('emnist_cnn', fed.input_shape, fed.num_classes)
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
  times: list[float] = []
  while sim.version < workload.rounds and sum(times) < max_seconds:
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
  }


def markdown(device: str, records: list[dict[str, Any]]) -> str:
  lines = [
    f'Device: {device}',
    '',
    '| case | strategy | examples/s | round s (steady) | rounds | all rounds s (projected) '
    '| programs |',
    '|---|---|---:|---:|---:|---:|---:|',
  ]
  for r in records:
    if r.get('skipped'):
      continue
    eps = r.get('examples_per_s')
    lines.append(
      f'| {r["case"]} | {r["strategy"]} | {eps if eps is None else f"{eps:,.0f}"} '
      f'| {r.get("round_s", "-")} | {r.get("rounds", "-")} | {r.get("projected_s", "-")} '
      f'| {r.get("programs", "-")} |'
    )
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  if _MAX_SECONDS.value < 0:
    cli.fail(f'--max_seconds={_MAX_SECONDS.value}: must be >= 0')
  cli.quiet_logging()
  import harness_lib  # deferred: JAX start-up after the flag checks

  device = device_name()
  records: list[dict[str, Any]] = []

  def emit(record: dict[str, Any]) -> None:
    records.append(record)
    print(json.dumps({'device': device, **record}), flush=True)

  if _HARNESS.value:
    for case in HARNESS_CASES:
      for record in harness_lib.run_case(case, quick=_REDUCED.value):
        if record['strategy'] in strategies():
          emit(record)
  workload = REDUCED_EMNIST if _REDUCED.value else EmnistWorkload()
  for strategy in strategies():
    emit(emnist_fedavg(strategy, workload, _MAX_SECONDS.value))
  table = markdown(device, records)
  print()
  print(table)
  if _OUTPUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      f.write(table + '\n')
  sys.stdout.flush()


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
