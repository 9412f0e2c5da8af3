"""Host time of a run with and without its observability outputs (task trace, TensorBoard).

  .venv/bin/python benchmarks/observability_overhead.py [--config=configs/fedbuff_fashion_mnist.py]
      [--repeats=3] [--data_dir=data]

Runs the config `--repeats` times each way, alternating (with, without, with, ...), so that
drifts of this machine's speed fall on both. "without" sets run.write_tasks=False and
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


def _run(observed: bool) -> float:
  from fedsim_jax.experiment import run_experiment

  config = _load_config(_CONFIG.value)
  config.data.data_dir = _DATA_DIR.value
  config.run.write_tasks = observed
  config.run.tensorboard = observed
  with tempfile.TemporaryDirectory() as workdir:
    summary = run_experiment(config, workdir)
  return summary['host']['simulation_seconds']


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  cli.quiet_logging()
  times: dict[str, list[float]] = {'with': [], 'without': []}
  for _ in range(_REPEATS.value):
    for name, observed in (('with', True), ('without', False)):
      times[name].append(_run(observed))
  medians = {name: statistics.median(values) for name, values in times.items()}
  result = {
    'config': _CONFIG.value,
    'seconds': times,
    'median_seconds': medians,
    'overhead': medians['with'] / medians['without'] - 1,
  }
  print(json.dumps(result))
  print('| outputs | simulation host seconds (each run) | median |')
  print('|---|---|---|')
  for name in times:
    runs = ', '.join(f'{t:.1f}' for t in times[name])
    print(f'| {name} trace and TensorBoard | {runs} | {medians[name]:.1f} |')
  print(f'overhead of the median: {100 * result["overhead"]:+.1f}%')


if __name__ == '__main__':
  app.run(main)
