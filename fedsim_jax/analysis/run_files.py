"""Loading run directories: one workdir (`load`) or the workdirs named on a command line
(`discover`), a sweep root standing for its `seed*/` workdirs; `finished_only` keeps the runs
whose results are final."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

from fedsim_jax import workdir as workdir_lib
from fedsim_jax.metrics.writers import read_metrics

METRICS = 'metrics.jsonl'
# The file a `fedsim-sweep` point folder holds (its settings), above its seed<s>/ workdirs.
POINT_FILE = 'point.json'


class RunFilesError(ValueError):
  """A path that holds no readable run: its message is one line naming the path."""


@dataclasses.dataclass
class RunFiles:
  """The files of one run directory.

  Attributes:
    workdir: the run's folder.
    config: `config.json` (the resolved config; {} when absent).
    metrics: the rows of `metrics.jsonl`, one per evaluation, in order.
    summary: `summary.json`, or None while the run has not written one.
    tasks: the records of `tasks.jsonl` (one per client task, in the order their outcomes became
      final), or None when the run wrote none.
    clients: `clients.json` (per-client lists 'dispatched', 'aggregated', 'gradient_steps',
      'busy_time'), or None when absent.
    client_evaluations: the records of `clients_eval.jsonl` (per-client accuracy of each
      evaluation, `data.client_test`), or None when the run wrote none.
    label: the name figures and tables give the run (its algorithm's name by default).
    seed: the run's seed (config 'seed', else the `seed<s>` folder name), or None.
    status: where the run stands (`fedsim_jax.workdir.run_status`): 'completed' or
      'budget_exhausted' (its files are its results), 'interrupted', 'diverged', 'failed',
      'running' or 'killed'.
  """

  workdir: pathlib.Path
  config: dict[str, Any]
  metrics: list[dict[str, Any]]
  summary: dict[str, Any] | None
  tasks: list[dict[str, Any]] | None
  clients: dict[str, list[float]] | None
  label: str
  seed: int | None
  status: str = 'completed'
  client_evaluations: list[dict[str, Any]] | None = None

  @property
  def finished(self) -> bool:
    """Whether the run completed (or stopped at its privacy budget): only then are its files
    its results."""
    return self.status in workdir_lib.FINISHED_STATUSES

  @property
  def unfinished_reason(self) -> str:
    """Why the run's files are not its results, in a few words ('' for a finished run)."""
    if self.finished:
      return ''
    message = (self.summary or {}).get('message') or (self.summary or {}).get('error')
    detail = f': {str(message).splitlines()[0][:120]}' if message else ''
    return _UNFINISHED_REASONS.get(self.status, self.status) + detail

  @property
  def algorithm(self) -> str | None:
    """The config's algorithm name (None if the config does not say)."""
    name = _section(self.config, 'algorithm').get('name')
    return None if name is None else str(name)

  @property
  def target_accuracy(self) -> float | None:
    """The config's run.target_accuracy (None if unset)."""
    target = _section(self.config, 'run').get('target_accuracy')
    return None if target is None else float(target)

  @property
  def dataset(self) -> str | None:
    """The config's dataset name (data.dataset, or data.name)."""
    data = _section(self.config, 'data')
    name = data.get('dataset', data.get('name'))
    return None if name is None else str(name)

  @property
  def num_clients(self) -> int | None:
    """The config's data.num_clients (None if unset)."""
    count = _section(self.config, 'data').get('num_clients')
    return None if count is None else int(count)

  @property
  def statistics(self) -> dict[str, Any]:
    """The summary's `statistics` dict ({} for runs without a summary or without statistics)."""
    if self.summary is None:
      return {}
    statistics = self.summary.get('statistics')
    return statistics if isinstance(statistics, dict) else {}


_UNFINISHED_REASONS = {
  workdir_lib.RUNNING: 'still running',
  workdir_lib.KILLED: 'killed (no final summary, or killed while --resume extended it)',
  'interrupted': 'interrupted (SIGINT/SIGTERM)',
  'diverged': 'diverged',
  'failed': 'failed',
}


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
  section = config.get(name)
  return section if isinstance(section, dict) else {}


def _read_json(path: pathlib.Path) -> Any:
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise RunFilesError(f'{path}: not valid JSON ({e.msg}, line {e.lineno})') from None
  except OSError as e:
    raise RunFilesError(f'{path}: cannot be read ({e.strerror})') from None


def _read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
  try:
    return read_metrics(path)
  except ValueError as e:
    raise RunFilesError(str(e)) from None
  except OSError as e:
    raise RunFilesError(f'{path}: cannot be read ({e.strerror})') from None


def _optional_json(path: pathlib.Path) -> Any:
  return _read_json(path) if path.is_file() else None


def _seed_of_folder(path: pathlib.Path) -> int | None:
  match = re.fullmatch(r'seed(\d+)', path.name)
  return int(match.group(1)) if match else None


def is_workdir(path: str | os.PathLike) -> bool:
  """Whether `path` is a run directory: a folder holding `metrics.jsonl`."""
  return (pathlib.Path(path) / METRICS).is_file()


def load(workdir: str | os.PathLike, label: str | None = None) -> RunFiles:
  """Reads the run in `workdir`.

  Args:
    workdir: a folder holding `metrics.jsonl` (and usually config.json, summary.json and, when
      the run wrote them, tasks.jsonl and clients.json).
    label: the run's name in figures and tables; default: its algorithm's name (else the
      folder's name).

  Raises:
    RunFilesError: `workdir` holds no metrics.jsonl, or one of its files does not parse.
  """
  path = pathlib.Path(workdir)
  if not path.is_dir():
    raise RunFilesError(f'{path}: no such directory')
  if not is_workdir(path):
    raise RunFilesError(f'{path}: not a run directory (no {METRICS})')
  config = _optional_json(path / 'config.json') or {}
  if not isinstance(config, dict):
    raise RunFilesError(f'{path / "config.json"}: not a JSON object')
  tasks_path = path / 'tasks.jsonl'
  clients_path = path / 'clients_eval.jsonl'
  seed = config.get('seed')
  metrics = _read_jsonl(path / METRICS)
  summary = _optional_json(path / 'summary.json')
  last_version = metrics[-1].get('version') if metrics else None
  run = RunFiles(
    workdir=path,
    config=config,
    metrics=metrics,
    summary=summary,
    tasks=_read_jsonl(tasks_path) if tasks_path.is_file() else None,
    clients=_optional_json(path / 'clients.json'),
    label='',
    seed=int(seed) if isinstance(seed, int) else _seed_of_folder(path),
    status=workdir_lib.run_status(path, summary, last_version),
    client_evaluations=_read_jsonl(clients_path) if clients_path.is_file() else None,
  )
  run.label = label or run.algorithm or path.resolve().name
  return run


def _sweep_members(root: pathlib.Path) -> list[pathlib.Path]:
  members = [p for p in root.glob('seed*') if p.is_dir() and is_workdir(p)]
  return sorted(members, key=lambda p: (_seed_of_folder(p) is None, _seed_of_folder(p), p.name))


def sweep_points(root: pathlib.Path) -> list[pathlib.Path]:
  """The point folders of a `fedsim-sweep` folder (those holding `point.json` and a workdir),
  in name order."""
  if not root.is_dir():
    return []
  return sorted(p for p in root.iterdir() if (p / POINT_FILE).is_file() and _sweep_members(p))


def discover(
  paths: Sequence[str | os.PathLike], labels: Sequence[str] | None = None
) -> list[list[RunFiles]]:
  """The runs named by `paths`, one group per path, or per point of a `fedsim-sweep` folder.

  A path is a workdir (a group of one run), a sweep root whose `seed*/` folders are workdirs (a
  group of its seeds, in seed order), or a `fedsim-sweep` folder (a group per point, labelled by
  the point's name). A group's label is `labels[i]` when given, else its first run's algorithm
  name; groups whose default labels coincide are told apart by their folder's name,
  `fedavg (lr0.1)`.

  Raises:
    RunFilesError: a path that is none of these, a run that does not load, or `labels` of the
      wrong length (or given with a `fedsim-sweep` folder).
  """
  if labels is not None and len(labels) != len(paths):
    raise RunFilesError(f'{len(labels)} labels given for {len(paths)} run directories')
  groups: list[list[RunFiles]] = []
  folders: list[pathlib.Path] = []  # each group's folder, which tells equal labels apart
  point_labels: dict[int, str] = {}
  for path in map(pathlib.Path, paths):
    if not path.is_dir():
      raise RunFilesError(f'{path}: no such directory')
    if is_workdir(path):
      groups.append([load(path)])
      folders.append(path)
      continue
    members = _sweep_members(path)
    points = [] if members else sweep_points(path)
    if not members and not points:
      raise RunFilesError(
        f'{path}: neither a run directory ({METRICS}), a sweep root (seed*/{METRICS}) nor a '
        f'fedsim-sweep folder (<point>/{POINT_FILE})'
      )
    if points and labels:
      raise RunFilesError(f'{path}: a fedsim-sweep folder labels its points; drop --labels')
    for point in points:
      point_labels[len(groups)] = point.name
      groups.append([load(member) for member in _sweep_members(point)])
      folders.append(point)
    if members:
      groups.append([load(member) for member in members])
      folders.append(path)
  if labels:
    names = [str(label) for label in labels]
  else:
    names = _default_labels(folders, groups)
    names = [point_labels.get(i, name) for i, name in enumerate(names)]
  for group, name in zip(groups, names):
    for run in group:
      run.label = name
  return groups


def _default_labels(paths: Sequence[str | os.PathLike], groups: list[list[RunFiles]]) -> list[str]:
  labels = [group[0].label for group in groups]
  folders = [pathlib.Path(path).resolve().name for path in paths]
  named = [
    f'{label} ({folder})' if labels.count(label) > 1 and folder != label else label
    for label, folder in zip(labels, folders)
  ]
  # Still equal (two folders of one name): numbered, so that files and rows stay apart.
  return [
    f'{name} #{named[:i].count(name) + 1}' if named.count(name) > 1 else name
    for i, name in enumerate(named)
  ]


def finished_only(
  groups: Sequence[Sequence[RunFiles]], include_unfinished: bool = False
) -> tuple[list[list[RunFiles]], list[str]]:
  """The runs of `groups` whose results are final, and one note per other run.

  A run that has not completed (`RunFiles.finished`: killed, interrupted, failed, diverged,
  still running, or killed while `--resume` extended it) is left out, and a group left without
  runs is dropped; with `include_unfinished` every run is kept. Each note names the run's
  folder, why it is unfinished, and whether it was left out.

  Raises:
    RunFilesError: no run is left.
  """
  kept: list[list[RunFiles]] = []
  notes = []
  for group in groups:
    for run in group:
      if not run.finished:
        action = 'included' if include_unfinished else 'left out (--include_unfinished keeps it)'
        notes.append(f'{run.workdir}: {run.unfinished_reason}; {action}')
    members = list(group) if include_unfinished else [run for run in group if run.finished]
    if members:
      kept.append(members)
  if not kept:
    raise RunFilesError(
      'no run has completed (' + '; '.join(notes)[:300] + '); --include_unfinished includes them'
    )
  return kept, notes


def group_label(group: Sequence[RunFiles]) -> str:
  """The label shared by a group's runs."""
  return group[0].label


def slug(label: str) -> str:
  """`label` as a file-name part: letters, digits, '.', '_' and '-' only."""
  return re.sub(r'[^A-Za-z0-9._-]+', '_', label).strip('_') or 'run'
