"""Staleness, fairness and compute statistics of a simulation, for metrics rows and summaries.

All are computed from counters the simulation keeps as it runs (and checkpoints), so they cost
nothing per event beyond a counter update:

- staleness of aggregated updates (versions missed between download and use): mean, nearest-
  rank p50/p95, max; over the run, and over the window since the last `Simulation.reset_window`;
- aggregated updates per client: min/median/max and Jain's fairness index
  (sum x)^2 / (n sum x^2), over all clients (1: every client equally often; 1/n: one client);
- the share of resolved tasks (aggregated or discarded) that were aggregated, overall and per
  client class (e.g. stragglers vs standard clients);
- busy and idle fractions of client time; wasted compute: local steps of discarded tasks, also
  as a fraction of all local steps run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
  from fedsim_jax.runtime.simulation import Simulation


def staleness_summary(counts: np.ndarray) -> dict[str, float | int | None]:
  """Mean, nearest-rank p50 and p95, and max of the staleness histogram `counts` (`counts[s]`
  updates of staleness s); None for each when it is empty."""
  total = int(counts.sum())
  if total == 0:
    return {'mean': None, 'p50': None, 'p95': None, 'max': None}
  values = np.arange(len(counts))
  cumulative = np.cumsum(counts)

  def percentile(p: float) -> int:
    rank = max(int(np.ceil(p / 100 * total)), 1)
    return int(np.searchsorted(cumulative, rank))

  return {
    'mean': float((values * counts).sum() / total),
    'p50': percentile(50),
    'p95': percentile(95),
    'max': int(np.flatnonzero(counts)[-1]),
  }


def jain_fairness(counts: np.ndarray) -> float | None:
  """Jain's index of `counts` (None when all are zero)."""
  counts = np.asarray(counts, np.float64)
  squares = float((counts**2).sum())
  return float(counts.sum() ** 2 / (len(counts) * squares)) if squares > 0 else None


def busy_fraction(sim: Simulation) -> float:
  """The share of client virtual time spent on finished tasks (0 at time 0)."""
  return float(sim.busy_time.sum() / (sim.num_clients * sim.now)) if sim.now > 0 else 0.0


def _share(aggregated: np.ndarray, discarded: np.ndarray) -> float | None:
  resolved = int(aggregated.sum() + discarded.sum())
  return float(aggregated.sum() / resolved) if resolved else None


def statistics(
  sim: Simulation,
  client_classes: Mapping[str, np.ndarray] | None = None,
  *,
  window: bool = False,
) -> dict[str, Any]:
  """The statistics of `sim` so far, flat, JSON-ready.

  Args:
    sim: the simulation.
    client_classes: class name -> boolean mask over clients (e.g. {'straggler': mask,
      'standard': ~mask}); adds `<name>_aggregated_share` for each.
    window: also the staleness of the current window (`staleness_window_*`).
  """
  aggregated, discarded = sim.aggregated_counts, sim.discarded_counts
  result: dict[str, Any] = {
    f'staleness_{name}': value for name, value in staleness_summary(sim.staleness_counts).items()
  }
  if window:
    result.update(
      (f'staleness_window_{name}', value)
      for name, value in staleness_summary(sim.window_staleness_counts).items()
    )
  busy = busy_fraction(sim)
  result.update(
    updates_per_client_min=int(aggregated.min()),
    updates_per_client_median=float(np.median(aggregated)),
    updates_per_client_max=int(aggregated.max()),
    jain_fairness=jain_fairness(aggregated),
    aggregated_share=_share(aggregated, discarded),
    client_busy_fraction=busy,
    client_idle_fraction=max(1.0 - busy, 0.0),
    wasted_steps=int(sim.wasted_steps),
    wasted_fraction=(float(sim.wasted_steps / sim.gradient_steps) if sim.gradient_steps else 0.0),
  )
  for name, mask in (client_classes or {}).items():
    result[f'{name}_aggregated_share'] = _share(aggregated[mask], discarded[mask])
  return result


def staleness_histogram(sim: Simulation) -> list[int]:
  """Aggregated updates per staleness 0, 1, ..., up to the largest seen."""
  counts = sim.staleness_counts
  nonzero = np.flatnonzero(counts)
  return counts[: nonzero[-1] + 1].tolist() if len(nonzero) else []


def run_report(sim: Simulation) -> dict[str, Any]:
  """Task accounting, participation and timing figures of `sim` for the run summary."""
  sim.accounting.check()
  aggregated = max(sim.accounting.aggregated, 1)
  return {
    'tasks': sim.accounting.as_dict(),
    'participation': {
      'clients_participated': int((sim.aggregated_counts > 0).sum()),
      'aggregated_per_client_min': int(sim.aggregated_counts.min()),
      'aggregated_per_client_mean': float(sim.aggregated_counts.mean()),
      'aggregated_per_client_max': int(sim.aggregated_counts.max()),
    },
    'mean_update_wait_time': sim.update_wait_time / aggregated,
    'client_busy_fraction': busy_fraction(sim),
    'mean_client_idle_time': float(np.mean(sim.now - sim.busy_time)),
    'executor_batches': sim.executor_batches,
    'mean_executed_batch_size': sim.executed_tasks / max(sim.executor_batches, 1),
  }
