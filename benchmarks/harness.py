"""Benchmark harness: fedsim's backends against per-client loops (JAX, PyTorch) and a roofline.

  .venv/bin/python benchmarks/harness.py                      # all cases (`make bench`)
  .venv/bin/python benchmarks/harness.py --cases=sync_mlp,scheduling --output=bench.jsonl
  .venv/bin/python benchmarks/harness.py --quick              # tiny sizes: a smoke test
  .venv/bin/python benchmarks/harness.py --cases=sync_cnn --torch_threads=1 --measure_seconds=30

Cases (`benchmarks/harness_lib.py` documents the strategies and figures):
  sync_mlp     sync FedAvg, 100 clients/round x 10 steps x B=32, MLP 784-200-200-10:
               fedsim_vmap, fedsim_loop, jax_client_loop, torch_client_loop, roofline.
  sync_cnn     the same with the MNIST CNN (582k params), 4 of 8 clients/round (a vmap round
               of the CNN is slow on CPU): also fedsim_loop_host.
  fedbuff_mlp  FedBuff, 1,000 clients, concurrency 100, K=10, 10 steps, MLP, vmap executor,
               deferred execution: 3,000 client updates after 1,000 of warm-up.
  compass_mlp  FedCompass cross-silo, 5 clients, Q in [20, 100], MLP, vmap and loop executors:
               200 client updates after 50 of warm-up.
  scheduling   FedBuff's event loop with NoTrainingExecutor: 100,000 client updates.

Prints one JSON line per (case, strategy) as it finishes, then a markdown table with each
strategy's examples/s relative to the roofline and to the PyTorch loop. PyTorch is optional
(`make bench-setup`); without it the torch rows say 'skipped'. Invalid flags exit with code 2 and
one line on stderr.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.cli import FlagError, parse_list

# The case names, repeated here so that flag errors do not wait for JAX to import.
_CASES = ('sync_mlp', 'sync_cnn', 'fedbuff_mlp', 'compass_mlp', 'scheduling')

_CASES_FLAG = flags.DEFINE_string(
  'cases', ','.join(_CASES), f'Comma list of cases to run; allowed: {",".join(_CASES)}.'
)
_QUICK = flags.DEFINE_bool('quick', False, 'Tiny sizes (smoke test); the figures mean nothing.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the JSON lines to this file.')
_MEASURE_SECONDS = flags.DEFINE_float(
  'measure_seconds',
  None,
  'Minimum measured seconds per strategy in the sync cases (default: 15, 0 with --quick).',
)
_TORCH_THREADS = flags.DEFINE_integer(
  'torch_threads', None, 'torch.set_num_threads of the PyTorch loop (default: the CPU cores).'
)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  try:
    cases = parse_list('cases', _CASES_FLAG.value, str, lambda c: c in _CASES, ','.join(_CASES))
  except FlagError as error:
    cli.fail(str(error))
  if not cases:
    cli.fail(f'--cases is empty; allowed values: {",".join(_CASES)}')
  seconds = _MEASURE_SECONDS.value
  if seconds is not None and seconds < 0:
    cli.fail(f'--measure_seconds={seconds}: must be >= 0')
  threads = _TORCH_THREADS.value
  if threads is not None and threads < 1:
    cli.fail(f'--torch_threads={threads}: must be >= 1')
  output = None
  if _OUTPUT.value:
    try:
      directory = os.path.dirname(os.path.abspath(_OUTPUT.value))
      os.makedirs(directory, exist_ok=True)
      output = open(_OUTPUT.value, 'w', encoding='utf-8')
    except OSError as error:
      cli.fail(f'--output={_OUTPUT.value}: {error.strerror or error}')
  cli.quiet_logging()
  # Deferred: JAX start-up after the flag checks. Found next to this script (sys.path[0]).
  import harness_lib

  if harness_lib.CASES != _CASES:
    cli.fail(f'harness case list {_CASES} differs from harness_lib.CASES {harness_lib.CASES}')
  records = []
  try:
    for case in cases:
      for record in harness_lib.run_case(
        case, quick=_QUICK.value, measure_seconds=seconds, torch_threads=threads
      ):
        records.append(record)
        line = harness_lib.json_line(record)
        print(line, flush=True)
        if output is not None:
          output.write(line + '\n')
          output.flush()
  finally:
    if output is not None:
      output.close()
  print()
  print(harness_lib.markdown_report(records, quick=_QUICK.value))
  sys.stdout.flush()


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
