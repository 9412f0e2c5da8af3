"""The generated "agreement with the paper" tables of docs/results/: one row per conclusion of a
paper, the paper's figure, ours over the seeds, and a verdict computed from them by one rule.

A conclusion is a `Claim`: the paper says that some quantity lies on one side of a threshold,
usually 0, and ours is that quantity per seed, paired on the seed (e.g. FedASMU's final accuracy
minus FedASMU-DA's on the same seed: "FedASMU is more accurate than FedASMU-DA" says > 0).
`assess` applies the rule the table states under itself (`CRITERION`):

* agrees: the quantity is on the paper's side of the threshold on every seed, on at least
  `MIN_SEEDS` seeds, and its mean over the seeds is further from the threshold than its sample
  standard deviation;
* does not agree: on the other side on every seed, beyond the standard deviation in the same way;
* inconclusive: anything else: fewer than `MIN_SEEDS` seeds, seeds on both sides (or on the
  threshold), a seed where the quantity is undetermined, or a mean within one standard deviation
  of the threshold.

A seed's value may be a bound (`Value.bound`): a run that missed a target is only known to need
more than its length, so a difference of times involving it is "> x" or "< x". A bound decides
the seed's side when it lies on that side, and counts at its value in the mean and deviation.
The kits build their claims (`experiments/<kit>/tables.py: claims`); this module assesses and
renders them, so every page states and applies the same rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from experiments.sweep import markdown_table, mean_std

AGREES = 'agrees'
DOES_NOT_AGREE = 'does not agree'
INCONCLUSIVE = 'inconclusive'
VERDICTS = (AGREES, DOES_NOT_AGREE, INCONCLUSIVE)
MIN_SEEDS = 2
SIDES = ('>', '<')

CRITERION = (
  '**Criterion.** Ours is the quantity of the "ours" column on each seed, paired on the seed. '
  f"**{AGREES}**: it is on the paper's side of the threshold on every seed (at least "
  f'{MIN_SEEDS} seeds) and its mean is further from the threshold than its standard deviation '
  f'over the seeds; **{DOES_NOT_AGREE}**: on the other side on every seed, in the same way; '
  f'**{INCONCLUSIVE}**: anything else (one seed, seeds on both sides, a seed where the quantity '
  'is undetermined, or a mean within one standard deviation of the threshold). A run that '
  'missed a target counts at its end time, so a difference involving it is a bound ("> x", '
  '"< x"). The paper\'s figures come from its own setting and budget; the verdict compares '
  'directions, not levels.'
)


@dataclasses.dataclass(frozen=True)
class Value:
  """One seed's value of a claim's quantity: exact (`bound` ''), or a bound: the quantity is
  greater ('>') or smaller ('<') than `value`."""

  value: float
  bound: str = ''

  def __post_init__(self) -> None:
    if self.bound not in ('', *SIDES):
      raise ValueError(f'bound={self.bound!r}; allowed: "", ">", "<"')
    if not math.isfinite(self.value):
      raise ValueError(f'value={self.value!r}; allowed: a finite number')


PerSeed = Mapping[int, 'Value | None']  # one value per seed; None: undetermined on that seed


@dataclasses.dataclass(frozen=True)
class Claim:
  """A conclusion of the paper and our per-seed values of the quantity it is about.

  Attributes:
    claim: the conclusion in words, as the paper draws it.
    source: where the paper draws it ('Table 2', 'Sec. 5, Fig. 2').
    paper: the paper's figure for it, in words and numbers.
    quantity: ours, in words, with its unit (e.g. 'FedASMU − FedASMU-DA, final accuracy (pp)').
    side: '>' or '<': the side of `threshold` on which the paper puts the quantity.
    seeds: our value per seed (None: undetermined on that seed).
    threshold: the reference the paper's side is relative to (0 for a difference).
    digits: decimals shown for our values.
    tolerance: a seed's value this close to the threshold is a tie (times to a target are
      read off the same evaluations, so equal ones differ only by float rounding).
  """

  claim: str
  source: str
  paper: str
  quantity: str
  side: str
  seeds: PerSeed
  threshold: float = 0.0
  digits: int = 2
  tolerance: float = 1e-6

  def __post_init__(self) -> None:
    if self.side not in SIDES:
      raise ValueError(f'side={self.side!r}; allowed: {list(SIDES)}')


@dataclasses.dataclass(frozen=True)
class Assessment:
  """`assess`'s result: the verdict, why (for 'inconclusive'), and ours over the seeds."""

  verdict: str
  reason: str
  mean: float | None
  std: float | None
  seeds: int


def seed_side(value: Value | None, threshold: float = 0.0, tolerance: float = 1e-6) -> str | None:
  """'>' or '<': the side of `threshold` a seed's value is on; None when it is undetermined
  (no value, a bound that does not decide the side) or a tie (within `tolerance` of it)."""
  if value is None:
    return None
  offset = value.value - threshold
  if value.bound == '>':
    return '>' if offset >= -tolerance else None
  if value.bound == '<':
    return '<' if offset <= tolerance else None
  return '>' if offset > tolerance else '<' if offset < -tolerance else None


def assess(claim: Claim) -> Assessment:
  """The verdict `CRITERION` gives `claim`."""
  known = {seed: v for seed, v in claim.seeds.items() if v is not None}
  values = [v.value for v in known.values()]
  mean, std = mean_std(values) if values else (None, None)

  def result(verdict: str, reason: str = '') -> Assessment:
    return Assessment(verdict, reason, mean, std, len(claim.seeds))

  if len(claim.seeds) < MIN_SEEDS:
    return result(INCONCLUSIVE, 'one seed' if len(claim.seeds) == 1 else 'no seed')
  sides_of = {
    seed: seed_side(v, claim.threshold, claim.tolerance) for seed, v in claim.seeds.items()
  }
  open_seeds = [seed for seed, side in sides_of.items() if side is None]
  exact_seeds = {seed for seed, v in claim.seeds.items() if v is not None and not v.bound}
  ties = [seed for seed in open_seeds if seed in exact_seeds]
  if ties:
    return result(INCONCLUSIVE, f'a tie on seed {", ".join(map(str, ties))}')
  if open_seeds:
    return result(INCONCLUSIVE, f'undetermined on seed {", ".join(map(str, open_seeds))}')
  sides = set(sides_of.values())
  if len(sides) > 1:
    return result(INCONCLUSIVE, 'seeds on both sides')
  assert mean is not None and std is not None
  if abs(mean - claim.threshold) <= std:
    return result(INCONCLUSIVE, 'within the seed spread')
  return result(AGREES if sides == {claim.side} else DOES_NOT_AGREE)


def _signed(value: float, digits: int) -> str:
  if round(value, digits) == 0:
    return f'{0:.{digits}f}'
  return f'{value:+,.{digits}f}'.replace('-', '−')


def format_value(value: Value | None, digits: int = 2) -> str:
  """A seed's value as shown: '+1.23', '> +600', 'n/a'."""
  if value is None:
    return 'n/a'
  text = _signed(value.value, digits)
  return f'{value.bound} {text}' if value.bound else text


def criterion_text(claim: Claim) -> str:
  """The claim's side of the rule in a few words, e.g. '> 0 on every seed'."""
  return f'{claim.side} {claim.threshold:g} on every seed, beyond 1 std'


def verdict_text(assessment: Assessment) -> str:
  return f'{assessment.verdict} ({assessment.reason})' if assessment.reason else assessment.verdict


NO_CLAIMS = 'No conclusion of the paper has the runs it needs in this result file.'


def _mean_text(claim: Claim, assessment: Assessment) -> str:
  """Mean ± std; a bound ('> x') where the seeds' values are bounds of one direction (the mean
  of exact values and lower bounds is itself a lower bound)."""
  if assessment.mean is None:
    return 'n/a'
  bounds = {v.bound for v in claim.seeds.values() if v is not None and v.bound}
  prefix = f'{bounds.pop()} ' if len(bounds) == 1 else ''
  text = prefix + _signed(assessment.mean, claim.digits)
  if assessment.seeds < 2:
    return text
  return f'{text} ± {assessment.std:,.{claim.digits}f}'


def agreement_table(claims: Iterable[Claim], note: str = '', criterion: bool = True) -> str:
  """Markdown: one row per claim (the paper's conclusion and source, its figure, ours as mean ±
  std and per seed, the criterion, the verdict), then `CRITERION` (unless `criterion` is False,
  for a block of `agreement_blocks`) and `note`."""
  claims = list(claims)
  if not claims:
    return NO_CLAIMS
  rows = []
  for claim in claims:
    assessment = assess(claim)
    summary = _mean_text(claim, assessment)
    per_seed = ', '.join(
      f'{seed}: {format_value(value, claim.digits)}' for seed, value in sorted(claim.seeds.items())
    )
    rows.append(
      [
        f'{claim.claim} ({claim.source})',
        claim.paper,
        claim.quantity,
        summary,
        per_seed,
        criterion_text(claim),
        f'**{verdict_text(assessment)}**',
      ]
    )
  header = [
    "Paper's conclusion (where)",
    'paper',
    'ours: quantity',
    'ours: mean ± std',
    'ours: per seed',
    'criterion',
    'verdict',
  ]
  parts = [markdown_table(header, rows)] + ([CRITERION] if criterion else [])
  if note:
    parts.append(note)
  return '\n\n'.join(parts)


def agreement_blocks(blocks: Iterable[tuple[str, Sequence[Claim]]]) -> str:
  """Markdown: a titled `agreement_table` per (title, claims) with claims, then `CRITERION`
  once."""
  parts = [
    f'**{title}**\n\n' + agreement_table(claims, criterion=False)
    for title, claims in blocks
    if claims
  ]
  return '\n\n'.join(parts + [CRITERION]) if parts else NO_CLAIMS


# ------------------------------------------------------------------------------------------------
# Building per-seed values from run records.


def exact(value: float | None) -> Value | None:
  return None if value is None else Value(float(value))


def time_value(time_to_target: float | None, end_time: float | None) -> Value | None:
  """A run's time to a target: exact when reached, else '> end_time' (None without one)."""
  if time_to_target is not None:
    return Value(float(time_to_target))
  return None if end_time is None else Value(float(end_time), '>')


def difference(a: Value | None, b: Value | None) -> Value | None:
  """a − b, a bound where either is (None when the bounds leave it open)."""
  if a is None or b is None:
    return None
  flipped = {'>': '<', '<': '>', '': ''}[b.bound]
  bounds = {a.bound, flipped} - {''}
  if len(bounds) > 1:
    return None
  return Value(a.value - b.value, bounds.pop() if bounds else '')


def scaled(value: Value | None, factor: float) -> Value | None:
  """`value` times a positive `factor`."""
  return None if value is None else Value(value.value * factor, value.bound)


def maximum(values: Sequence[Value | None]) -> Value | None:
  """The largest of exact values and lower bounds ('>'); None if any is missing or an upper
  bound."""
  if not values or any(v is None or v.bound == '<' for v in values):
    return None
  top = max(v.value for v in values if v is not None)
  lower = any(v is not None and v.bound == '>' for v in values)
  return Value(top, '>' if lower else '')


def minimum(values: Sequence[Value | None]) -> Value | None:
  """The smallest of exact values and lower bounds ('>'); None if any is missing or an upper
  bound, or when a lower bound below the smallest exact value leaves it open."""
  if not values or any(v is None or v.bound == '<' for v in values):
    return None
  known = [v.value for v in values if v is not None and not v.bound]
  lower = [v.value for v in values if v is not None and v.bound == '>']
  if not known:
    return Value(min(lower), '>')
  smallest = min(known)
  return Value(smallest) if all(b >= smallest for b in lower) else None


def paired(first: PerSeed, second: PerSeed) -> dict[int, Value | None]:
  """first − second on every seed both have."""
  return {seed: difference(first[seed], second[seed]) for seed in sorted(first) if seed in second}


def combined(
  per_method: Sequence[PerSeed], combine: Callable[[Sequence[Value | None]], Value | None]
) -> dict[int, Value | None]:
  """`combine` (e.g. `maximum`) of the methods' values on every seed all of them have."""
  if not per_method:
    return {}
  seeds = set.intersection(*(set(values) for values in per_method))
  return {seed: combine([values[seed] for values in per_method]) for seed in sorted(seeds)}
