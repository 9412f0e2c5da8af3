"""Runs as a pandas DataFrame, for notebooks and for the tables of `fedsim-compare`.

  runs = load_runs('runs/lr_sweep')            # every run under a folder (a sweep, say)
  runs = load_runs('runs/*/seed*')              # a glob
  final = load_runs(['runs/fedavg', 'runs/fedbuff'], last_only=True)
  final.groupby('config.client.learning_rate')['test_accuracy'].agg(['mean', 'std'])

Each row is one metrics row (one evaluation) of one run, with the run's identity (`run`,
`seed`, `status`, `finished`, and `point` for a run of a `fedsim-sweep`), every field of its
metrics row as written (`version`, `virtual_time`, `test_accuracy`, ...), its resolved settings
flattened as `config.<section>.<field>` and its summary flattened as `summary.<key>`
(`summary.final_accuracy`, `summary.host.seconds`, ...). Lists become tuples, so that every
column can be grouped by.
"""

from __future__ import annotations

import glob
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedsim_jax.analysis.run_files import POINT_FILE, RunFiles, RunFilesError, is_workdir, load

IDENTITY_COLUMNS = ('run', 'point', 'seed', 'status', 'finished')


def flatten(value: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  """`value`'s leaves under dotted keys (`{'a': {'b': 1}}` -> `{'a.b': 1}`); lists become
  tuples (hashable, so that a DataFrame can group by them)."""
  flat: dict[str, Any] = {}
  for key, item in value.items():
    name = f'{prefix}{key}'
    if isinstance(item, Mapping) and item:
      flat.update(flatten(item, f'{name}.'))
    elif isinstance(item, list):
      flat[name] = _frozen(item)
    else:
      flat[name] = item
  return flat


def _frozen(item: Any) -> Any:
  if isinstance(item, list):
    return tuple(_frozen(x) for x in item)
  if isinstance(item, Mapping):
    return tuple(sorted((k, _frozen(v)) for k, v in item.items()))
  return item


def _has_magic(pattern: str) -> bool:
  return glob.has_magic(pattern)


def _workdirs_under(root: pathlib.Path) -> list[pathlib.Path]:
  """The run directories at or below `root` (a workdir's own subfolders are not searched)."""
  if is_workdir(root):
    return [root]
  found = []
  for directory, subdirs, _ in os.walk(root):
    path = pathlib.Path(directory)
    if is_workdir(path):
      found.append(path)
      subdirs.clear()
    else:
      subdirs[:] = sorted(d for d in subdirs if not d.startswith('.'))
  return sorted(found)


def find_runs(paths_or_glob: str | os.PathLike | Iterable[str | os.PathLike]) -> list[pathlib.Path]:
  """The run directories that `paths_or_glob` names: each item is a workdir, a folder searched
  recursively for workdirs (a sweep root), or a glob pattern (`**` recurses) whose matches are
  either; in the order given, each item's runs sorted, every run once.

  Raises:
    RunFilesError: an item that matches nothing or holds no run (one line naming it).
  """
  items = [paths_or_glob] if isinstance(paths_or_glob, (str, os.PathLike)) else list(paths_or_glob)
  if not items:
    raise RunFilesError('no run directories given')
  runs: list[pathlib.Path] = []
  for item in items:
    text = os.fspath(item)
    matches = sorted(glob.glob(text, recursive=True)) if _has_magic(text) else [text]
    if not matches:
      raise RunFilesError(f'{text}: matches no path')
    found = [run for match in matches for run in _workdirs_under(pathlib.Path(match))]
    if not found:
      if not _has_magic(text) and not pathlib.Path(text).is_dir():
        raise RunFilesError(f'{text}: no such directory')
      raise RunFilesError(f'{text}: holds no run directory (no metrics.jsonl at or below it)')
    runs.extend(run for run in found if run not in runs)
  return runs


def sweep_point(run: RunFiles) -> str | None:
  """The name of the `fedsim-sweep` point the run belongs to (the folder holding `point.json`
  above its `seed<s>/` workdir), else None."""
  folder = run.workdir.parent
  return folder.name if (folder / POINT_FILE).is_file() else None


def run_rows(run: RunFiles, last_only: bool = False) -> list[dict[str, Any]]:
  """The DataFrame rows of one loaded run (see the module docstring)."""
  identity = {
    'run': str(run.workdir),
    'point': sweep_point(run),
    'seed': run.seed,
    'status': str(run.status),
    'finished': run.finished,
  }
  settings = flatten(run.config, 'config.')
  summary = flatten(run.summary or {}, 'summary.')
  metrics = run.metrics[-1:] if last_only else run.metrics
  return [
    {**identity, **{k: _frozen(v) for k, v in row.items()}, **settings, **summary}
    for row in metrics
  ]


def load_runs(
  paths_or_glob: str | os.PathLike | Sequence[str | os.PathLike],
  *,
  last_only: bool = False,
  finished_only: bool = False,
) -> Any:
  """The runs that `paths_or_glob` names (`find_runs`) as one pandas DataFrame.

  Args:
    paths_or_glob: a workdir, a folder holding workdirs at any depth (a sweep root), a glob
      pattern, or a list of these.
    last_only: one row per run (its last evaluation) instead of one per evaluation.
    finished_only: only runs that completed (or stopped at their privacy budget); by default
      every run is included and `status` / `finished` say where it stands.

  Returns:
    A `pandas.DataFrame`: the identity columns `run`, `point`, `seed`, `status`, `finished`, the
    metrics row's fields, then `config.*` and `summary.*` (see the module docstring); rows in
    run order, then evaluation order. A run without evaluations contributes no row.

  Raises:
    RunFilesError: a path that holds no run, or a run whose files do not parse.
  """
  import pandas as pd  # Deferred: the command-line tools start without it.

  rows: list[dict[str, Any]] = []
  for path in find_runs(paths_or_glob):
    run = load(path)
    if finished_only and not run.finished:
      continue
    rows.extend(run_rows(run, last_only=last_only))
  frame = pd.DataFrame.from_records(rows)
  if frame.empty:
    return pd.DataFrame(columns=list(IDENTITY_COLUMNS))
  first = [c for c in IDENTITY_COLUMNS if c in frame.columns]
  settings = sorted(c for c in frame.columns if c.startswith('config.'))
  summary = sorted(c for c in frame.columns if c.startswith('summary.'))
  metrics = [c for c in frame.columns if c not in {*first, *settings, *summary}]
  return frame[first + metrics + settings + summary]
