"""How host cost grows with the work: the fitted growth and the tables of the scaling curves.

A record (one measured point of `benchmarks/scaling.py`) names its `curve` (`cohort`,
`clients`, `model`, `evaluation`), its `series` (the algorithm, with `/schedule` or `/train`
on the clients curve; `client` or `central` on the evaluation curve), its `size` (cohort or
concurrency, clients, parameters, evaluated clients), host `seconds` per server version (per
evaluation on the evaluation curve) and `peak_rss_mb`.

`fit_growth` fits `t(n) = a + b g(n)` (a, b >= 0, least squares in relative error) for each
candidate growth g: constant (b = 0), linear (n), n log n and quadratic (n^2), and classifies a
series as the simplest candidate whose error is within `TOLERANCE` of the best one's. `a` is
the fixed term (per-version overhead that does not depend on n), `b g(n)` the term that grows;
their shares at the smallest and largest n say which dominates at each end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

Record = dict[str, Any]
# Candidate growth terms, simplest first.
GROWTHS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
  'constant': lambda n: np.zeros_like(n),
  'linear': lambda n: n,
  'n log n': lambda n: n * np.log(n),
  'quadratic': lambda n: n * n,
}
TOLERANCE = 0.05  # relative RMS error a simpler growth may exceed the best fit's by


@dataclasses.dataclass(frozen=True)
class Growth:
  """The fitted growth of one series.

  Attributes:
    growth: the chosen candidate of `GROWTHS`.
    slope: least-squares slope of log(value) on log(size) over every point.
    end_slope: the same over the three largest sizes (the growing term's own order, once the
      fixed term no longer hides it).
    fixed, scale: a and b of `a + b g(n)`.
    error: relative RMS error of the chosen fit.
    fixed_share_small, fixed_share_large: a / t(n) at the smallest and the largest size.
  """

  growth: str
  slope: float
  end_slope: float
  fixed: float
  scale: float
  error: float
  fixed_share_small: float
  fixed_share_large: float


def _log_slope(sizes: np.ndarray, values: np.ndarray) -> float:
  return float(np.polyfit(np.log(sizes), np.log(values), 1)[0])


def _fit(sizes: np.ndarray, values: np.ndarray, growth: str) -> tuple[float, float, float]:
  """(a, b, relative RMS error) of `a + b g(sizes)` fitted to `values`, a, b >= 0."""
  g = GROWTHS[growth](sizes)
  columns = np.stack([np.ones_like(sizes), g], axis=1) / values[:, None]
  if growth == 'constant':
    columns = columns[:, :1]
  # Scale the columns so that nnls sees comparable magnitudes (n^2 reaches 10^12).
  norms = np.linalg.norm(columns, axis=0)
  norms[norms == 0] = 1.0
  solution, _ = nnls(columns / norms, np.ones_like(sizes))
  coefficients = solution / norms
  a = float(coefficients[0])
  b = float(coefficients[1]) if len(coefficients) > 1 else 0.0
  residual = (a + b * g) / values - 1.0
  return a, b, float(np.sqrt(np.mean(residual**2)))


def fit_growth(sizes: Sequence[float], values: Sequence[float]) -> Growth:
  """The growth of `values` against `sizes` (module docstring); needs two sizes or more, all
  values positive.

  Raises:
    ValueError: fewer than two distinct sizes, or a value or size that is not positive.
  """
  n = np.asarray(sizes, np.float64)
  t = np.asarray(values, np.float64)
  if len(np.unique(n)) < 2 or len(n) != len(t):
    raise ValueError(f'need two sizes or more, one value each; got {len(n)} sizes, {len(t)} values')
  if (n <= 0).any() or (t <= 0).any() or not np.isfinite(t).all():
    raise ValueError('sizes and values must be positive and finite')
  order = np.argsort(n)
  n, t = n[order], t[order]
  fits = {growth: _fit(n, t, growth) for growth in GROWTHS}
  best = min(error for _, _, error in fits.values())
  growth = next(g for g, (_, _, error) in fits.items() if error <= best + TOLERANCE)
  a, b, error = fits[growth]
  g = GROWTHS[growth](n)

  def share(i: int) -> float:
    total = a + b * g[i]
    return a / total if total > 0 else 1.0

  return Growth(
    growth=growth,
    slope=_log_slope(n, t),
    end_slope=_log_slope(n[-3:], t[-3:]),
    fixed=a,
    scale=b,
    error=error,
    fixed_share_small=share(0),
    fixed_share_large=share(-1),
  )


# ---- Tables --------------------------------------------------------------------------------

SERIES_NAMES = {
  'fedavg': 'FedAvg',
  'fedbuff': 'FedBuff',
  'fedcompass': 'FedCompass',
  'fedavg/schedule': 'FedAvg, schedule only',
  'fedavg/train': 'FedAvg, trained',
  'fedbuff/schedule': 'FedBuff, schedule only',
  'fedbuff/train': 'FedBuff, trained',
  'client': 'per-client',
  'central': 'central',
}
CURVES = {
  # curve: (size column, unit of `seconds`, the fixed term, the growing term)
  'cohort': (
    'cohort / concurrency',
    'version',
    'per-version overhead',
    'per-task work (training, stacking, aggregation)',
  ),
  'clients': ('clients', 'version', 'per-version work', 'per-client scans'),
  'model': ('parameters', 'version', 'per-version overhead', 'per-parameter work'),
  'evaluation': ('evaluated clients', 'evaluation', 'per-call overhead', 'per-example work'),
}


def _series(records: Sequence[Record], curve: str) -> dict[str, list[Record]]:
  """The records of `curve` by series (in first-seen order), each sorted by size."""
  series: dict[str, list[Record]] = {}
  for record in records:
    if record['curve'] == curve:
      series.setdefault(record['series'], []).append(record)
  return {name: sorted(points, key=lambda r: r['size']) for name, points in series.items()}


def _ms(seconds: float | None) -> str:
  if seconds is None:
    return '-'
  ms = 1e3 * seconds
  return f'{ms:,.0f}' if ms >= 100 else f'{ms:.1f}' if ms >= 1 else f'{ms:.2f}'


def _mb(value: float | None) -> str:
  return '-' if value is None else f'{value:,.0f}'


def curve_table(records: Sequence[Record], curve: str) -> str:
  """One row per size: each series' host ms per version (or evaluation), client updates per
  version where a series records them, and peak RSS."""
  size_name, unit, _, _ = CURVES[curve]
  series = _series(records, curve)
  if not series:
    raise ValueError(f'no {curve} records')
  with_updates = {
    name
    for name, points in series.items()
    if any(p.get('updates_per_version') for p in points) and not name.endswith('/schedule')
  }
  header = [size_name]
  for name in series:
    label = SERIES_NAMES.get(name, name)
    header.append(f'{label}: ms / {unit}')
    if name in with_updates:
      header.append(f'{label}: updates / {unit}')
    header.append(f'{label}: peak RSS MB')
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---:|' * len(header)]
  by_size = {name: {p['size']: p for p in points} for name, points in series.items()}
  for size in sorted({p['size'] for points in series.values() for p in points}):
    cells = [f'{size:,}']
    for name in series:
      point = by_size[name].get(size)
      cells.append(_ms(point['seconds']) if point else '-')
      if name in with_updates:
        cells.append(f'{point["updates_per_version"]:,.0f}' if point else '-')
      cells.append(_mb(point['peak_rss_mb']) if point else '-')
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _percent(share: float) -> str:
  return f'{100 * share:.0f}%'


def growth_table(records: Sequence[Record]) -> str:
  """Per curve and series: the sizes, the log-log slope of host time (all points, and the three
  largest), the fitted growth and the fixed term's share at each end, and RSS's slope and
  growth."""
  lines = [
    '| curve | series | sizes | time: slope (all / top end) | time: growth | fixed share, '
    'smallest / largest | dominant term, smallest / largest | RSS: slope | RSS: growth |',
    '|---|---|---|---:|---|---:|---|---:|---|',
  ]
  for curve, (_, _, fixed_name, growing_name) in CURVES.items():
    for name, points in _series(records, curve).items():
      if len(points) < 3:
        continue
      sizes = [p['size'] for p in points]
      time = fit_growth(sizes, [p['seconds'] for p in points])
      rss = fit_growth(sizes, [p['peak_rss_mb'] for p in points])

      def dominant(share: float) -> str:
        return fixed_name if share >= 0.5 else growing_name

      lines.append(
        f'| {curve} | {SERIES_NAMES.get(name, name)} | {sizes[0]:,}-{sizes[-1]:,} '
        f'| {time.slope:.2f} / {time.end_slope:.2f} | {time.growth} '
        f'| {_percent(time.fixed_share_small)} / {_percent(time.fixed_share_large)} '
        f'| {dominant(time.fixed_share_small)} / {dominant(time.fixed_share_large)} '
        f'| {rss.slope:.2f} | {rss.growth} |'
      )
  return '\n'.join(lines)


def setup_table(settings: dict[str, Any]) -> str:
  """The machine, date and fixed settings the points were measured under."""
  rows = [(key.replace('_', ' '), value) for key, value in settings.items()]
  lines = ['| setting | value |', '|---|---|']
  lines += [f'| {key} | {value} |' for key, value in rows]
  return '\n'.join(lines)
