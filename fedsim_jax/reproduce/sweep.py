"""What every reproduction binary shares: flag-list parsing, resumable runs and `main`.

A reproduction binary defines its flags, a `parse_settings() -> dict` that raises `FlagError`,
a `run_sweep(settings, workdir, data_dir) -> records` built on `load_or_run`, and a table
writer; `sweep_main` wires them with the project's error conventions (one line on stderr,
exit code 2, no traceback).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Sequence

from fedsim_jax import cli


class FlagError(ValueError):
  """An invalid flag value; its message is one line."""


def parse_list(name: str, text: str, convert: Callable[[str], Any],
               check: Callable[[Any], bool], allowed: str) -> list:
  """Parses the comma list `--name=text`: converted, checked, duplicates dropped, order kept.

  Raises:
    FlagError: an item does not convert or fails `check`; the message names the flag and
      `allowed`.
  """
  values = []
  for item in (item.strip() for item in text.split(',')):
    if not item:
      continue
    try:
      value = convert(item)
    except ValueError:
      value = None
    if value is None or not check(value):
      raise FlagError(f'--{name}={text!r}: {item!r} is invalid; allowed values: {allowed}')
    if value not in values:
      values.append(value)
  return values


def parse_one(name: str, text: str, convert: Callable[[str], Any],
              check: Callable[[Any], bool], allowed: str) -> Any:
  """Parses a flag that takes exactly one value."""
  values = parse_list(name, text, convert, check, allowed)
  if len(values) != 1 or ',' in text:
    raise FlagError(f'--{name}={text!r} is invalid; allowed values: {allowed}')
  return values[0]


def load_or_run(run_dir: str, config: Any, dataset: Callable[[], Any],
                run_missing: bool = True) -> tuple[dict[str, Any] | None, str]:
  """The run's summary and 'reused' when `run_dir/summary.json` exists, else runs it: 'ran'
  (or, with `run_missing=False`, returns `(None, 'missing')`).

  Args:
    run_dir: the run's output directory.
    config: its experiment config.
    dataset: returns the federated dataset to run on (called only when the run is needed,
      so a sweep builds each federation at most once and not at all when resuming).
  """
  summary_path = os.path.join(run_dir, 'summary.json')
  if os.path.exists(summary_path):
    with open(summary_path, encoding='utf-8') as f:
      return json.load(f), 'reused'
  if not run_missing:
    return None, 'missing'
  from fedsim_jax.experiment import run_experiment  # Deferred: JAX start-up after flag checks.

  return run_experiment(config, run_dir, dataset=dataset()), 'ran'


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


def sweep_main(argv: Sequence[str], *, parse_settings: Callable[[], dict[str, Any]],
               run_sweep: Callable[[dict[str, Any], str, str | None], list[dict[str, Any]]],
               write_outputs: Callable[..., None], workdir: str, output: str | None,
               data_dir: str | None) -> None:
  """A reproduction binary's `main`: parse, sweep, write `results.jsonl` and the tables.

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
  output = output or os.path.join(workdir, 'tables.md')
  try:
    records = run_sweep(settings, workdir, data_dir)
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError) as error:
    cli.fail(str(error))
  wall = time.perf_counter() - start
  write_outputs(records, settings, workdir, output, wall)
  print(f'results: {os.path.abspath(os.path.join(workdir, "results.jsonl"))}')
  print(f'tables: {os.path.abspath(output)}')
  print(f'total wall time {wall:.1f}s')
