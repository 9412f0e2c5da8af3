"""Small helpers the study kits share for their run records: grouping, percent cells, and
per-seed values of a claim's quantity (`experiments.agreement.Value`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from experiments import agreement, sweep

Record = Mapping[str, Any]
PerSeed = dict[int, 'agreement.Value | None']


def base_record(cell: Any, seed: int, summary: Mapping[str, Any], run_dir: str) -> dict[str, Any]:
  """What every study kit records of a run: its cell's fields, seed, status, final and best
  accuracy, and where it came from (host seconds, code, run directory); kits add their own."""
  return dict(
    cell.record(),
    seed=seed,
    status=summary.get('status'),
    final_accuracy=summary.get('final_accuracy'),
    best_accuracy=summary.get('best_accuracy'),
    host_seconds=sweep.host_seconds(dict(summary)),
    code=sweep.run_code(dict(summary)),
    workdir=run_dir,
  )


def group(records: Iterable[Record], key: Callable[[Record], Any]) -> dict[Any, list[Record]]:
  """`records` grouped by `key`, in first-seen order."""
  groups: dict[Any, list[Record]] = {}
  for record in records:
    groups.setdefault(key(record), []).append(record)
  return groups


def percent(values: Sequence[float]) -> str:
  """'mean ± std' of fractions, in %, one decimal ('n/a' for none)."""
  if not values:
    return 'n/a'
  mean, std = sweep.mean_std([100.0 * v for v in values])
  return f'{mean:.1f} ± {std:.1f}'


def values(runs: Sequence[Record], key: str) -> list[float]:
  """`key` of every run that has it."""
  return [r[key] for r in runs if r.get(key) is not None]


def points(key: str) -> Callable[[Record], agreement.Value | None]:
  """A run's `key` (a fraction) in percentage points, as a claim's value."""

  def value(record: Record) -> agreement.Value | None:
    number = record.get(key)
    return agreement.exact(None if number is None else 100.0 * number)

  return value


def per_seed(runs: Iterable[Record], value: Callable[[Record], Any]) -> PerSeed:
  return {int(r['seed']): value(r) for r in runs}


def paired_difference(
  first: Sequence[Record],
  second: Sequence[Record],
  value: Callable[[Record], Any],
  second_value: Callable[[Record], Any] | None = None,
) -> PerSeed:
  """value(first) - value(second) (or `second_value` of the second) on every seed both have."""
  return agreement.paired(per_seed(first, value), per_seed(second, second_value or value))


def time_to_target_text(runs: Sequence[Record]) -> str:
  """Mean virtual seconds to the target over the runs; '> t (n missed)' when n runs missed it
  (counted at their end time), 'n/a' when a run records neither."""
  times = [agreement.time_value(r.get('time_to_target'), r.get('final_virtual_time')) for r in runs]
  if not times or any(t is None for t in times):
    return 'n/a'
  mean = sweep.mean_std([t.value for t in times if t is not None])[0]
  missed = sum(1 for t in times if t is not None and t.bound)
  return f'> {mean:,.0f} ({missed} missed)' if missed else f'{mean:,.0f}'
