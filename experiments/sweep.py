"""What every reproduction binary shares: flag-list parsing, resumable runs, output files and
`main`. Where runs stand and how settings paths are set and checked is `fedsim_jax.sweep`'s, the
machinery `fedsim-sweep` runs on.

A reproduction binary defines its flags, a `parse_settings() -> dict` that raises `FlagError`,
a `run_sweep(settings, workdir, data_dir) -> records` built on `load_or_run`, and a table
writer (`markdown_table`, `write_results`, `write_text`, and the statistics `mean_std`,
`mean_time_to_target`, `spearman`); `sweep_main` wires them with the project's error conventions
(one line on stderr, exit code 2, no traceback).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from fedsim_jax import cli
from fedsim_jax.cli import FlagError, parse_list
from fedsim_jax.sweep.paths import (  # noqa: F401 - the kits' settings paths
  KWARGS_PREFIX,
  PARTITION_PREFIX,
  PLUGIN_KWARGS_PREFIXES,
  set_existing,
  setting_value,
  stale_setting,
)
from fedsim_jax.sweep.runs import (  # noqa: F401 - the kits' run states, shared with fedsim-sweep
  FINAL_STATUSES,
  RunState,
  ended,
  host_seconds,
  markdown_table,
  run_code,
  run_state,
  status_table,
)

_STATUS = flags.DEFINE_bool(
  'status',
  False,
  'Print each run of the sweep as done, running, resumable or pending, with its host time and '
  'last evaluated version, and exit; nothing runs and no table is written.',
)
_EXPORT = flags.DEFINE_string(
  'export',
  None,
  'Also write the run records, compact, to this JSON file (one small file per sweep, e.g. '
  'docs/results/data/fedasmu_600s.json): the file experiments/results_docs.py renders the '
  'tables of docs/results/ from. With --only_existing it exports the finished runs.',
)

# Under --status (set by `sweep_main`), `load_or_run` records each run's state here instead of
# running it.
_STATES: list[RunState] | None = None


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> None:
  """Raises `ConfigError` (one line naming `name` and `allowed`) unless `value` is allowed."""
  if value not in allowed:
    from fedsim_jax.config import ConfigError  # Deferred: keeps this module free of JAX.

    raise ConfigError(f'{name}={value!r} is not allowed; allowed values: {list(allowed)}')


Override = tuple[str | None, str, Any]  # (algorithm or None for every run, setting, value)


def define_overrides_flag(example: str) -> flags.FlagHolder[str]:
  """Defines a kit's `--set` flag (parsed by `parse_overrides`); `example` shows one item."""
  return flags.DEFINE_string(
    'set',
    '',
    "Settings changed after the paper's: '[algorithm:]path=value;...', e.g. "
    f"'{example}' (a diagnostic or sensitivity run; use its own --workdir). An "
    'algorithm.kwargs.<field> path without the algorithm: prefix must be a setting of every '
    "run's algorithm.",
  )


def checked_paths(base: Sequence[str], overrides: Sequence[Override]) -> tuple[str, ...]:
  """The settings a reused run must share with the requested one: `base` and every path
  `--set` changes."""
  return tuple(base) + tuple(path for _, path, _ in overrides)


def parse_overrides(name: str, text: str, algorithms: Sequence[str]) -> list[Override]:
  """Parses `--name='[algorithm:]path=value;...'`: settings changed after the paper's, for one
  algorithm or (without the prefix) for every run, e.g.
  `feast_msg:algorithm.kwargs.server_learning_rate=0.1;run.eval_every=10`. Values are Python
  literals (a bare word is a string).

  Raises:
    FlagError: an item without '=' or with an unknown algorithm.
  """
  import ast

  overrides = []
  for item in filter(None, (part.strip() for part in text.split(';'))):
    target, _, value_text = item.partition('=')
    algorithm, _, path = target.strip().rpartition(':')
    if not value_text or not path:
      raise FlagError(
        f'--{name}: {item!r} is invalid; allowed values: [algorithm:]path=value '
        'items separated by ;'
      )
    if algorithm and algorithm not in algorithms:
      raise FlagError(
        f'--{name}: algorithm {algorithm!r} is not allowed; allowed values: {list(algorithms)}'
      )
    try:
      value = ast.literal_eval(value_text.strip())
    except (ValueError, SyntaxError):
      value = value_text.strip()
    overrides.append((algorithm or None, path.strip(), value))
  return overrides


def apply_overrides(config: Any, algorithm: str, overrides: Sequence[Override]) -> None:
  """Applies the overrides that concern `algorithm` to its run's `config` (`set_existing`:
  a setting this build lacks raises `ConfigError`)."""
  for target, path, value in overrides:
    if target is None or target == algorithm:
      set_existing(config, path, value)


def parse_one(
  name: str, text: str, convert: Callable[[str], Any], check: Callable[[Any], bool], allowed: str
) -> Any:
  """Parses a flag that takes exactly one value."""
  values = parse_list(name, text, convert, check, allowed)
  if len(values) != 1 or ',' in text:
    raise FlagError(f'--{name}={text!r} is invalid; allowed values: {allowed}')
  return values[0]


def parse_choices(name: str, text: str, allowed: Sequence[str]) -> list[str]:
  """A non-empty comma list of `--name` values from `allowed`; raises `FlagError`."""
  values = parse_list(name, text, str, lambda v: v in allowed, ','.join(allowed))
  if not values:
    raise FlagError(f'--{name} is empty; give at least one value')
  return values


def validated(configs: list[Any]) -> list[Any]:
  """`configs`, each checked whole (the algorithm's settings included), so that an invalid
  value stops a sweep before its first run, not when its own run starts."""
  from fedsim_jax.experiment import validate  # Deferred: JAX start-up after flag checks.

  for config in configs:
    validate(config)
  return configs


def load_or_run(
  run_dir: str, config: Any, dataset: Callable[[], Any], run_missing: bool = True
) -> tuple[dict[str, Any] | None, str]:
  """The run's summary and 'reused' when `run_dir` holds a run that ended (`ended`), else runs
  it: 'ran' (or, with `run_missing=False`, returns `(None, 'missing')`). A run that was killed
  or interrupted continues from its newest checkpoint, to exactly the results of an unbroken
  run; one that an error stopped continues from its newest checkpoint too.

  Args:
    run_dir: the run's output directory.
    config: its experiment config.
    dataset: returns the federated dataset to run on (called only when the run is needed,
      so a sweep builds each federation at most once and not at all when resuming).
  """
  if _STATES is not None:  # --status: record where the run stands, run nothing
    state = run_state(run_dir)
    _STATES.append(state)
    return None, state.state
  summary_path = os.path.join(run_dir, 'summary.json')
  if os.path.exists(summary_path):
    with open(summary_path, encoding='utf-8') as f:
      summary = json.load(f)
    if ended(summary):
      return summary, 'reused'
  if not run_missing:
    return None, 'missing'
  from fedsim_jax.experiment import run_experiment  # Deferred: JAX start-up after flag checks.

  summary = run_experiment(config, run_dir, dataset=dataset(), resume=True)
  if summary.get('status') == 'interrupted':
    # SIGINT/SIGTERM stopped the run at a checkpoint: the sweep stops too (the next call
    # continues the run), rather than starting the next run or tabulating a partial one.
    print(
      f'interrupted: {run_dir} (checkpointed); rerun the same command to continue the sweep',
      file=sys.stderr,
    )
    raise SystemExit(128 + int(summary.get('signal') or signal.SIGINT))
  return summary, 'ran'


def run_cells(
  runs: Sequence[tuple[int, Any]],
  make_config: Callable[[Any, int], Any],
  workdir: str,
  record: Callable[[Any, int, dict[str, Any], str], dict[str, Any]],
  *,
  federation_key: Callable[[Any, int], Any],
  run_missing: bool = True,
  log: Callable[[str], None] = print,
  describe: Callable[[dict[str, Any]], str] | None = None,
) -> list[dict[str, Any]]:
  """Runs (or reuses) the `runs` of a study kit, `(seed, cell)` pairs whose cells have
  `run_dir(seed)`, and returns `record(cell, seed, summary, run_dir)` of each finished one.

  Every config is built (`make_config(cell, seed)`) and checked before the first run; runs
  with equal `federation_key(cell, seed)` share one federation (order them so that they are
  consecutive); `describe(summary)` adds to each run's log line."""
  from fedsim_jax.experiment import build_federated_dataset  # Deferred: JAX start-up.

  configs = validated([make_config(cell, seed) for seed, cell in runs])
  records, federations = [], LastFederation()
  for index, ((seed, cell), config) in enumerate(zip(runs, configs, strict=True), 1):
    run_dir = os.path.join(workdir, cell.run_dir(seed))
    label = f'[{index}/{len(runs)}] {os.path.relpath(run_dir, workdir)}'
    key = federation_key(cell, seed)
    summary, status = load_or_run(
      run_dir,
      config,
      lambda config=config, key=key: federations.get(key, lambda: build_federated_dataset(config)),
      run_missing=run_missing,
    )
    if summary is None:
      log(f'{label}: {status}')
      continue
    extra = f'  {describe(summary)}' if describe is not None else ''
    log(
      f'{label}: {status}  final {summary.get("final_accuracy", float("nan")):.4f}{extra}  '
      f'host {host_seconds(summary) or float("nan"):.1f}s'
    )
    records.append(record(cell, seed, summary, run_dir))
  return records


class LastFederation:
  """Holds the most recently built federation (sweeps order runs that share one together)."""

  def __init__(self) -> None:
    self._key: Any = None
    self._dataset: Any = None

  def get(self, key: Any, build: Callable[[], Any]) -> Any:
    """The federation for `key`, built (and the previous one released) when `key` changes."""
    if self._dataset is None or key != self._key:
      self._dataset = None  # Release the old arrays before building the next.
      self._dataset, self._key = build(), key
    return self._dataset


def table_row(markdown: str, name: str) -> list[str]:
  """The cells after the first of the markdown row whose first cell is `name` (the inverse of
  `markdown_table`, e.g. to read a written `tables.md` back)."""
  for line in markdown.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if cells[0] == name:
      return cells[1:]
  raise ValueError(f'no row {name!r} in the table')


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
  mean = sum(values) / len(values)
  if len(values) < 2:
    return mean, 0.0
  return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_time_to_target(records: Sequence[Any]) -> float | None:
  """Mean `time_to_target` over the seeds' records that reached the target; None (the target
  counts as missed) when it was missed in at least half of them, or for no records."""
  times = [r['time_to_target'] for r in records if r.get('time_to_target') is not None]
  if not records or 2 * (len(records) - len(times)) >= len(records):
    return None
  return sum(times) / len(times)


def average_ranks(values: Sequence[float]) -> list[float]:
  """Ranks starting at 1 (smallest first), ties sharing their average rank."""
  order = sorted(range(len(values)), key=lambda i: values[i])
  ranks = [0.0] * len(values)
  i = 0
  while i < len(order):
    j = i
    while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
      j += 1
    for k in range(i, j + 1):
      ranks[order[k]] = (i + j) / 2 + 1
    i = j + 1
  return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
  """Spearman's rank correlation (Pearson on average ranks); None for fewer than three pairs
  or a constant side."""
  if len(x) != len(y) or len(x) < 3:
    return None
  rx, ry = average_ranks(x), average_ranks(y)
  mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
  sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
  sxx = sum((a - mx) ** 2 for a in rx)
  syy = sum((b - my) ** 2 for b in ry)
  if sxx == 0 or syy == 0:
    return None
  return sxy / math.sqrt(sxx * syy)


def write_results(records: Sequence[dict[str, Any]], workdir: str) -> str:
  """Writes `<workdir>/results.jsonl`, one JSON record per run; returns its path."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, 'results.jsonl')
  with open(path, 'w', encoding='utf-8') as f:
    for record in records:
      f.write(json.dumps(record, sort_keys=True) + '\n')
  return path


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path` atomically, creating its directory."""
  from fedsim_jax.metrics.writers import write_text as write_atomically

  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  write_atomically(path, text)


def sweep_main(
  argv: Sequence[str],
  *,
  parse_settings: Callable[[], dict[str, Any]],
  run_sweep: Callable[[dict[str, Any], str, str | None], list[dict[str, Any]]],
  write_outputs: Callable[..., None],
  workdir: str,
  output: str | None,
  data_dir: str | None,
) -> None:
  """A reproduction binary's `main`: parse, sweep, write `results.jsonl` and the tables, and,
  with `--export`, the compact result file for docs/results (`experiments/results_data.py`).

  Invalid flags, configs and missing or corrupt data exit with code 2 and one stderr line.
  """
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {list(argv[1:])}')
  start = time.perf_counter()
  try:
    settings = parse_settings()
  except FlagError as error:
    cli.fail(str(error))
  from fedsim_jax.config import ConfigError
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError

  cli.quiet_logging()
  if _STATUS.value:
    global _STATES
    _STATES = []
    try:
      with contextlib.redirect_stdout(io.StringIO()):  # the sweep's per-run lines
        run_sweep(settings, workdir, data_dir)
    except (ConfigError, DatasetNotFoundError, CorruptDatasetError) as error:
      cli.fail(str(error))
    finally:
      states, _STATES = _STATES, None
    print(status_table(states, workdir))
    return
  output = output or os.path.join(workdir, 'tables.md')
  if _EXPORT.value is not None:
    from experiments import results_data

    try:
      results_data.prepare_path(_EXPORT.value)
    except results_data.ResultsDataError as error:
      cli.fail(str(error))
  try:
    records = run_sweep(settings, workdir, data_dir)
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError) as error:
    cli.fail(str(error))
  wall = time.perf_counter() - start
  write_outputs(records, settings, workdir, output, wall)
  print(f'results: {os.path.abspath(os.path.join(workdir, "results.jsonl"))}')
  print(f'tables: {os.path.abspath(output)}')
  if _EXPORT.value:
    from experiments import results_data

    # The kit is the package of the table writer: experiments.<kit>.tables.
    kit = write_outputs.__module__.split('.')[-2]
    try:
      path = results_data.export(
        _EXPORT.value, kit, records, settings, results_data.command_line(sys.argv)
      )
    except results_data.ResultsDataError as error:
      cli.fail(str(error))
    print(f'exported: {os.path.abspath(path)} ({len(records)} runs)')
  print(f'total wall time {wall:.1f}s')
