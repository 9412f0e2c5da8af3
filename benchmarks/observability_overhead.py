"""Host time of a run with and without its observability outputs (task trace, TensorBoard).

  .venv/bin/python benchmarks/observability_overhead.py [--config=configs/fedbuff_fashion_mnist.py]
      [--repeats=3] [--data_dir=data]

After one warm-up run (which compiles the client programs that later runs of the process
reuse), runs the config `--repeats` times each way, alternating (with, without, with, ...), so
that drifts of this machine's speed fall on both. "without" sets run.write_tasks=False and
run.tensorboard=False. Reports each run's `summary['host']['simulation_seconds']` (host time
of the simulation loop, evaluations included; data loading excluded), the medians and their
ratio, as a JSON line and a table. Checkpoints are left at their defaults in both.
"""

import importlib.util
import json
import statistics
import tempfile

from absl import app, flags

from fedsim_jax import cli

_CONFIG = flags.DEFINE_string('config', 'configs/fedbuff_fashion_mnist.py', 'Config file.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Runs each way.')
_DATA_DIR = flags.DEFINE_string('data_dir', 'data', 'Prepared data dir.')


def _load_config(path: str):
  spec = importlib.util.spec_from_file_location('benchmark_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _run(observed: bool) -> dict[str, float]:
  from fedsim_jax.experiment import run_experiment

  config = _load_config(_CONFIG.value)
  config.data.data_dir = _DATA_DIR.value
  config.run.write_tasks = observed
  config.run.tensorboard = observed
  with tempfile.TemporaryDirectory() as workdir:
    summary = run_experiment(config, workdir)
  return {'simulation': summary['host']['simulation_seconds'], 'host': summary['host']['seconds']}


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  cli.quiet_logging()
  _run(False)  # warm-up: compiles what the measured runs reuse
  runs: dict[str, list[dict[str, float]]] = {'with': [], 'without': []}
  for _ in range(_REPEATS.value):
    for name, observed in (('with', True), ('without', False)):
      runs[name].append(_run(observed))
  medians = {
    name: {kind: statistics.median(r[kind] for r in values) for kind in ('simulation', 'host')}
    for name, values in runs.items()
  }
  overhead = {
    kind: medians['with'][kind] / medians['without'][kind] - 1 for kind in ('simulation', 'host')
  }
  print(json.dumps({'config': _CONFIG.value, 'seconds': runs, 'overhead': overhead}))
  print('| outputs | simulation loop seconds (each run) | median | whole run (host) median |')
  print('|---|---|---|---|')
  for name, values in runs.items():
    each = ', '.join(f'{r["simulation"]:.2f}' for r in values)
    print(
      f'| {name} trace and TensorBoard | {each} | {medians[name]["simulation"]:.2f} | '
      f'{medians[name]["host"]:.2f} |'
    )
  print(
    f'overhead of the medians: simulation loop {100 * overhead["simulation"]:+.1f}%, '
    f'whole run {100 * overhead["host"]:+.1f}%'
  )


if __name__ == '__main__':
  app.run(main)
