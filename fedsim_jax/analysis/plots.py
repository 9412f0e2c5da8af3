"""Figures of loaded runs: accuracy curves of groups of seeds, a client timeline, the staleness
histogram and the updates each client contributed.

Every function returns a `matplotlib.figure.Figure` built without pyplot: nothing is shown, no
global figure state is kept, and no display is needed (`save` writes PNG through Agg, or SVG).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from fedsim_jax.analysis import measures
from fedsim_jax.analysis.run_files import RunFiles, group_label

BANDS = ('minmax', 'std')
# Colours of task outcomes; each discard reason takes the next of DISCARD_COLOURS.
OUTCOME_COLOURS = {
  'aggregated': '#2ca02c',
  'in_flight': '#7f7f7f',
  'waiting': '#bcbd22',
  'skipped': '#17becf',
}
DISCARD_COLOURS = (
  '#d62728',
  '#ff7f0e',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#1f77b4',
  '#393b79',
  '#ad494a',
)
# Aggregation instants up to this many are also drawn across the timeline's rows.
MAX_AGGREGATION_LINES = 200
# Above this many aggregation instants, the strip above the timeline shows how many fall in each
# of AGGREGATION_BINS spans of time (scaled to the busiest) instead of one tick per instant.
MAX_AGGREGATION_TICKS = 2000
AGGREGATION_BINS = 200
# Tasks shorter than this share of the timeline's span are drawn this wide, so they stay visible.
MIN_BAR_SHARE = 1e-3


class MissingData(ValueError):
  """The run does not record what a figure needs (the message is one line)."""


def _seed_text(run: RunFiles) -> str:
  """', seed 3' (and ', unfinished: killed' for a run that did not complete)."""
  seed = '' if run.seed is None else f', seed {run.seed}'
  return seed if run.finished else f'{seed}, unfinished: {run.status}'


def mean_curve(
  curves: Sequence[tuple[np.ndarray, np.ndarray]], band: str = 'minmax'
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
  """(x, mean, low, high) of curves (x, y) of several seeds, None when all are empty.

  The curves are interpolated linearly onto the union of their x values within the span that
  all of them cover. The band is min..max, or mean ± the sample std (ddof=1) with `band='std'`;
  one curve is its own mean and band.
  """
  if band not in BANDS:
    raise ValueError(f'band={band!r}; allowed: {BANDS}')
  curves = [(x, y) for x, y in curves if x.size]
  if not curves:
    return None
  if len(curves) == 1:
    x, y = curves[0]
    return x, y, y, y
  start, stop = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
  grid = np.unique(np.concatenate([x for x, _ in curves]))
  if start <= stop:
    grid = grid[(grid >= start) & (grid <= stop)]
  values = np.stack([np.interp(grid, x, y) for x, y in curves])
  mean = values.mean(axis=0)
  if band == 'std':
    std = values.std(axis=0, ddof=1)
    return grid, mean, mean - std, mean + std
  return grid, mean, values.min(axis=0), values.max(axis=0)


def _targets(groups: Sequence[Sequence[RunFiles]], target: float | None) -> list[float]:
  if target is not None:
    return [float(target)]
  return sorted({t for group in groups for run in group if (t := run.target_accuracy) is not None})


def accuracy_figure(
  groups: Sequence[Sequence[RunFiles]], band: str = 'minmax', target: float | None = None
) -> Figure:
  """Test accuracy against virtual time (left) and against client updates (right): one line per
  group, the mean over its seeds with a shaded band (`mean_curve`), and a dashed line at the
  target accuracy (`target`, else each target the runs' configs set).

  Raises:
    MissingData: no run has an evaluation with a test accuracy.
  """
  fig = Figure(figsize=(12, 4.8), layout='constrained')
  axes = fig.subplots(1, 2, sharey=True)
  band_name = 'min-max' if band == 'minmax' else '±1 sample std'
  targets = _targets(groups, target)
  drawn = False
  for ax, (key, name) in zip(
    axes, (('virtual_time', 'virtual time (s)'), ('client_updates', 'client updates'))
  ):
    for index, group in enumerate(groups):
      curve = mean_curve([measures.accuracy_curve(run, key) for run in group], band)
      if curve is None:
        continue
      drawn = True
      x, mean, low, high = curve
      colour = f'C{index % 10}'
      seeds = f'{len(group)} seeds' if len(group) > 1 else '1 seed'
      unfinished = sum(not run.finished for run in group)
      if unfinished:
        seeds += f', {unfinished} unfinished'
      ax.plot(x, mean, color=colour, linewidth=1.6, label=f'{group_label(group)} ({seeds})')
      if len(group) > 1:
        ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
    for line in targets:
      ax.axhline(line, color='black', linestyle='--', linewidth=1, label=f'target {line:g}')
    ax.set_xlabel(name)
    ax.grid(alpha=0.3)
  if not drawn:
    raise MissingData('no run has an evaluation with a test accuracy')
  axes[0].set_ylabel('test accuracy')
  axes[0].legend(loc='lower right', fontsize='small')
  datasets = sorted({d for group in groups for run in group if (d := run.dataset)})
  on = f' on {", ".join(datasets)}' if datasets else ''
  fig.suptitle(f'Test accuracy{on}: mean over seeds, band {band_name}')
  return fig


def sampled_rows(clients: int, max_rows: int) -> np.ndarray:
  """The client ids a timeline shows: all of them, or `max_rows` spread evenly over them
  (always the first and the last)."""
  if max_rows < 1:
    raise ValueError(f'max_rows={max_rows}; at least 1')
  if clients <= max_rows:
    return np.arange(clients)
  return np.unique(np.linspace(0, clients - 1, max_rows).round().astype(int))


def _category(task: dict[str, Any]) -> str:
  outcome = str(task.get('outcome'))
  if outcome == 'discarded':
    reason = task.get('reason')
    return f'discarded: {reason}' if reason else 'discarded'
  return outcome


def _colours(categories: Sequence[str]) -> dict[str, str]:
  """A colour for every category: fixed ones for outcomes, discard reasons in sorted order."""
  colours, spare = {}, iter(DISCARD_COLOURS * (1 + len(categories) // len(DISCARD_COLOURS)))
  for category in sorted(categories):
    colours[category] = OUTCOME_COLOURS.get(category) or next(spare)
  return colours


def _legend_order(category: str) -> tuple[int, str]:
  ranks = {'aggregated': 0, 'in_flight': 2, 'waiting': 3, 'skipped': 4}
  return ranks.get(category, 1), category


def _task_arrays(
  tasks: Sequence[dict[str, Any]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(client, dispatch time, end time, category) of the tasks that name a client and a dispatch
  time; a task without an end time ends where it starts."""
  number = measures.as_number
  client, start, end, category = [], [], [], []
  for task in tasks:
    dispatched = number(task.get('dispatch_time'))
    if not isinstance(task.get('client'), int) or dispatched is None:
      continue
    ended = number(task.get('end_time'))
    client.append(task['client'])
    start.append(dispatched)
    end.append(dispatched if ended is None else ended)
    category.append(_category(task))
  return (
    np.asarray(client, dtype=int),
    np.asarray(start, dtype=float),
    np.asarray(end, dtype=float),
    np.asarray(category, dtype=str),
  )


def _rectangles(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, half: float) -> np.ndarray:
  """Vertices (n, 4, 2) of n axis-aligned rectangles [x0, x1] x [y - half, y + half]."""
  bottom, top = y - half, y + half
  corners = [(x0, bottom), (x1, bottom), (x1, top), (x0, top)]
  return np.stack([np.stack(corner, axis=-1) for corner in corners], axis=1)


def timeline_figure(run: RunFiles, max_rows: int = 100) -> Figure:
  """The client timeline (a Gantt chart) of one run: a row per client, a bar per task from its
  dispatch to its end (arrival, dropout, or planned arrival if still in flight), coloured by
  outcome and discard reason, and the server's aggregation instants as ticks above the rows
  (and as thin lines across them when there are at most `MAX_AGGREGATION_LINES`; above
  `MAX_AGGREGATION_TICKS`, the strip shows their density over time instead). Above
  `max_rows` clients, `max_rows` rows sampled evenly are shown and the title says so.

  Raises:
    MissingData: the run has no tasks.jsonl, or it holds no task.
  """
  if run.tasks is None:
    raise MissingData(f'{run.workdir}: no tasks.jsonl (run.write_tasks=False, or an older run)')
  clients = measures.client_count(run)
  client, start, end, category = _task_arrays(run.tasks)
  if not client.size or clients == 0:
    raise MissingData(f'{run.workdir}: tasks.jsonl holds no task')
  times = (measures.as_number(task.get('aggregation_time')) for task in run.tasks)
  aggregations = np.unique(np.asarray([t for t in times if t is not None], dtype=float))

  shown = sampled_rows(clients, max_rows)
  position = np.full(clients, -1)
  position[shown] = np.arange(shown.size)
  row = position[client]
  span = max(float(end.max()), float(start.max()), 1e-9) - min(float(start.min()), 0.0)
  end = np.maximum(end, start + MIN_BAR_SHARE * span)

  rows = shown.size
  height = min(max(3.5, 1.6 + 0.11 * rows), 14.0)
  fig = Figure(figsize=(12, height), layout='constrained')
  top, ax = fig.subplots(
    2, 1, sharex=True, gridspec_kw={'height_ratios': [0.35, max(height - 1.6, 1.5)]}
  )
  categories = sorted(set(category.tolist()), key=_legend_order)
  colours = _colours(categories)
  handles: list[Patch | Line2D] = []
  for name in categories:
    chosen = (category == name) & (row >= 0)
    bars = _rectangles(start[chosen], end[chosen], row[chosen].astype(float), 0.4)
    # An (n, 4, 2) array is a valid sequence of polygons and far faster than a list of them.
    collection = PolyCollection(
      bars,  # type: ignore[arg-type]
      facecolors=colours[name],
      edgecolors='none',
      linewidths=0,
    )
    ax.add_collection(collection)
    total = int((category == name).sum())
    handles.append(Patch(color=colours[name], label=f'{name} ({total})'))
  if aggregations.size > MAX_AGGREGATION_TICKS:
    counts, edges = np.histogram(aggregations, bins=AGGREGATION_BINS)
    top.stairs(counts / counts.max(), edges, fill=True, color='black')
  elif aggregations.size:
    top.vlines(aggregations, 0, 1, color='black', linewidth=0.5)
  if aggregations.size:
    if aggregations.size <= MAX_AGGREGATION_LINES:
      ax.vlines(aggregations, -0.5, rows - 0.5, color='black', linewidth=0.4, alpha=0.25, zorder=0)
    handles.append(
      Line2D([], [], color='black', linewidth=0.8, label=f'aggregation ({aggregations.size})')
    )
  top.set_ylim(0, 1)
  top.set_yticks([])
  top.set_ylabel('server', rotation=0, ha='right', va='center')
  ax.set_xlim(min(float(start.min()), 0.0), float(end.max()))
  ax.set_ylim(rows - 0.5, -0.5)
  step = max(1, math.ceil(rows / 25))
  ticks = np.arange(0, rows, step)
  ax.set_yticks(ticks, [str(c) for c in shown[ticks]])
  ax.set_ylabel('client')
  ax.set_xlabel('virtual time (s)')
  title = f'{run.label}: client tasks over virtual time{_seed_text(run)}'
  if rows < clients:
    title += f'\n{rows} of {clients} clients shown, sampled evenly; legend counts all tasks'
  top.set_title(title)
  fig.legend(handles=handles, loc='outside lower center', ncols=min(len(handles), 5))
  return fig


def staleness_figure(run: RunFiles) -> Figure:
  """How many updates were aggregated at each staleness (server versions between the one a
  client downloaded and the one that includes its update), stacked with the discarded updates
  whose staleness tasks.jsonl records; the mean of the aggregated ones as a dashed line.

  Raises:
    MissingData: the run records no staleness (no tasks.jsonl and no
      statistics.staleness_histogram in its summary), or none of an aggregated update.
  """
  counts = measures.staleness_counts(run)
  if counts is None:
    raise MissingData(
      f'{run.workdir}: no staleness recorded (no tasks.jsonl, no statistics.staleness_histogram)'
    )
  aggregated, discarded = counts
  if not aggregated.sum():
    raise MissingData(f'{run.workdir}: no aggregated update with a recorded staleness')
  staleness = np.arange(aggregated.size)
  fig = Figure(figsize=(8, 4.5), layout='constrained')
  ax = fig.subplots()
  ax.bar(staleness, aggregated, width=0.85, color=OUTCOME_COLOURS['aggregated'], label='aggregated')
  if discarded.sum():
    ax.bar(
      staleness,
      discarded,
      width=0.85,
      bottom=aggregated,
      color=DISCARD_COLOURS[0],
      label='discarded',
    )
  mean = float((staleness * aggregated).sum() / aggregated.sum())
  ax.axvline(mean, color='black', linestyle='--', linewidth=1, label=f'mean {mean:.2f}')
  ax.set_xlabel('staleness (server versions)')
  ax.set_ylabel('updates')
  ax.set_xlim(-0.6, max(aggregated.size, 2) - 0.4)
  ax.legend(fontsize='small')
  ax.grid(axis='y', alpha=0.3)
  ax.set_title(f'{run.label}: staleness of updates{_seed_text(run)}')
  return fig


def updates_figure(run: RunFiles) -> Figure:
  """The updates each client had aggregated, clients sorted from most to fewest, over the tasks
  each was dispatched (lighter); the title gives min / median / max and Jain's fairness index.

  Raises:
    MissingData: the run has neither tasks.jsonl nor clients.json.
  """
  counts = measures.updates_per_client(run)
  if counts is None or counts[0].size == 0:
    raise MissingData(f'{run.workdir}: no per-client counts (no tasks.jsonl, no clients.json)')
  aggregated, dispatched = counts
  order = np.argsort(-aggregated, kind='stable')
  edges = np.arange(aggregated.size + 1)
  fig = Figure(figsize=(10, 4.5), layout='constrained')
  ax = fig.subplots()
  ax.stairs(dispatched[order], edges, fill=True, color='#c7c7c7', label='dispatched')
  ax.stairs(aggregated[order], edges, fill=True, color='#1f77b4', label='aggregated')
  ax.set_xlim(0, aggregated.size)
  ax.set_xlabel('clients, most aggregated updates first')
  ax.set_ylabel('tasks')
  ax.legend(fontsize='small')
  ax.grid(axis='y', alpha=0.3)
  fairness = measures.jain_fairness(aggregated)
  jain = 'n/a' if fairness is None else f'{fairness:.3f}'
  ax.set_title(
    f'{run.label}: aggregated updates per client{_seed_text(run)}\n'
    f'min {aggregated.min()}, median {np.median(aggregated):g}, max {aggregated.max()}, '
    f'Jain fairness {jain}'
  )
  return fig


def clients_figure(run: RunFiles) -> Figure:
  """The distribution of per-client test accuracy over virtual time (`clients_eval.jsonl`):
  the range over the evaluated clients (lightest), 10th to 90th percentile, the median and the
  mean; with personalization, the fine-tuned clients' mean as a dashed line.

  Raises:
    MissingData: the run wrote no per-client evaluation (`data.client_test` was 'none').
  """
  records = run.client_evaluations
  if not records:
    raise MissingData(f'{run.workdir}: no per-client evaluation (clients_eval.jsonl)')
  time = np.array([record['virtual_time'] for record in records], float)
  accuracy = [np.asarray(record['accuracy'], float) for record in records]
  q = np.array([np.percentile(a, (0, 10, 50, 90, 100)) for a in accuracy])
  fig = Figure(figsize=(8, 4.5), layout='constrained')
  ax = fig.subplots()
  ax.fill_between(time, q[:, 0], q[:, 4], color='#1f77b4', alpha=0.15, label='min-max')
  ax.fill_between(time, q[:, 1], q[:, 3], color='#1f77b4', alpha=0.3, label='10th-90th pct.')
  ax.plot(time, q[:, 2], color='#1f77b4', linewidth=1, label='median')
  ax.plot(time, [a.mean() for a in accuracy], color='black', linewidth=1.5, label='mean')
  if all('personalized_accuracy' in record for record in records):
    tuned = [np.mean(record['personalized_accuracy']) for record in records]
    ax.plot(time, tuned, color='#d62728', linestyle='--', label='personalized mean')
  ax.set_xlabel('virtual time (s)')
  ax.set_ylabel("accuracy on the client's own test data")
  ax.set_ylim(0, 1)
  ax.legend(fontsize='small', loc='lower right')
  ax.grid(alpha=0.3)
  clients = len(records[-1]['clients'])
  ax.set_title(f'{run.label}: per-client accuracy, {clients} clients{_seed_text(run)}')
  return fig


def save(fig: Figure, path: str | os.PathLike, dpi: int = 100) -> None:
  """Writes `fig` to `path`; the suffix picks the format (.png, .svg, .pdf)."""
  fig.savefig(path, dpi=dpi)
