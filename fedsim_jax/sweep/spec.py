"""What a sweep runs: the settings it varies, how (grid or random search), and its points.

A sweep varies dotted settings of one config (`client.learning_rate`,
`algorithm.kwargs.buffer_size`), each over a list of values or, in a random search, a
distribution:

  --sweep.client.learning_rate=0.01,0.03,0.1       a list (grid or random search)
  --sweep.client.learning_rate='log_uniform(1e-3,1e-1)'   a distribution (random search)

or the same in a sweep file (TOML):

  config = "fedsim_jax.configs.fedavg_fashion_mnist"   # unless --config is given
  seeds = [0, 1, 2]
  search = "random"                                     # or "grid" (the default)
  num_points = 8
  [set]                                                 # settings of every point
  "run.num_rounds" = 50
  [sweep]
  "client.learning_rate" = {log_uniform = [1e-3, 1e-1]}
  "algorithm.kwargs.buffer_size" = [5, 10]

A grid search runs every combination; a random search draws `num_points` distinct points
(lists: uniformly; distributions: as named) with `search_seed`, point by point, so that a larger
`num_points` with the same seed keeps the earlier points. Each point is named by its settings
(`learning_rate=0.03,buffer_size=5`), which is also its folder: a rerun finds its runs again
whatever the order or number of points.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import tomllib

from fedsim_jax.str_enum import StrEnum


class SweepError(ValueError):
  """An invalid sweep specification: the message is one line naming the setting and what it
  allows."""


class Search(StrEnum):
  GRID = 'grid'
  RANDOM = 'random'


@dataclasses.dataclass(frozen=True)
class Distribution:
  """A random search's distribution of one setting: `uniform(low, high)`, `log_uniform(low,
  high)` (both continuous, drawn to 6 significant digits) or `int_uniform(low, high)` (the
  integers low..high, both included)."""

  kind: str
  low: float
  high: float

  KINDS = ('uniform', 'log_uniform', 'int_uniform')

  def __post_init__(self) -> None:
    if self.kind not in self.KINDS:
      raise SweepError(f'{self.kind}(...) is not a distribution; allowed: {list(self.KINDS)}')
    if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
      raise SweepError(f'{self}: the bounds are invalid; allowed: finite numbers with low < high')
    if self.kind == 'log_uniform' and self.low <= 0:
      raise SweepError(f'{self}: allowed: 0 < low < high')
    if self.kind == 'int_uniform' and not (
      float(self.low).is_integer() and float(self.high).is_integer()
    ):
      raise SweepError(f'{self}: allowed: integer bounds')

  def draw(self, rng: np.random.Generator) -> float | int:
    if self.kind == 'int_uniform':
      return int(rng.integers(int(self.low), int(self.high), endpoint=True))
    if self.kind == 'uniform':
      value = rng.uniform(self.low, self.high)
    else:
      value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
    return float(f'{value:.6g}')

  def __str__(self) -> str:
    return f'{self.kind}({self.low:g},{self.high:g})'


Values = tuple[Any, ...] | Distribution


@dataclasses.dataclass(frozen=True)
class Point:
  """One point of a sweep: its name (and folder) and the settings it sets, in the sweep's
  parameter order."""

  name: str
  settings: tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class SweepSpec:
  """A sweep: `parameters` (dotted setting -> values or a distribution) searched by `search`,
  each point run with every seed of `seeds`; `fixed` settings apply to every point."""

  parameters: Mapping[str, Values]
  seeds: tuple[int, ...]
  search: Search = Search.GRID
  num_points: int | None = None
  search_seed: int = 0
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self) -> None:
    if not self.parameters:
      raise SweepError(
        'the sweep varies no setting; allowed: --sweep.<setting>=v1,v2,... (or a [sweep] '
        'table in --sweep_file)'
      )
    if not self.seeds or any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
      raise SweepError(f'seeds={list(self.seeds)} is invalid; allowed: distinct integers >= 0')
    for path, values in self.parameters.items():
      if path in ('seed', 'data.partition_seed') or not path:
        raise SweepError(f'--sweep.{path}: allowed: any setting but the seeds (use --seeds)')
      if path in self.fixed:
        raise SweepError(f'{path} is both swept and set; allowed: one of the two')
      if isinstance(values, tuple) and not values:
        raise SweepError(f'--sweep.{path} lists no value; allowed: a comma list of values')
      if isinstance(values, tuple) and len(set(map(repr, values))) != len(values):
        raise SweepError(f'--sweep.{path} lists a value twice; allowed: distinct values')
    distributions = [p for p, v in self.parameters.items() if isinstance(v, Distribution)]
    if self.search == Search.GRID:
      if distributions:
        raise SweepError(
          f'--sweep.{distributions[0]}={self.parameters[distributions[0]]}: a distribution '
          'needs --search=random; allowed in a grid: a comma list of values'
        )
      if self.num_points is not None:
        raise SweepError('--num_points applies to --search=random only; allowed: leave it out')
    elif self.num_points is None or self.num_points < 1:
      raise SweepError(
        f'--num_points={self.num_points} is invalid for --search=random; allowed: an integer >= 1'
      )
    elif not distributions and self.num_points > self.grid_size():
      raise SweepError(
        f'--num_points={self.num_points} exceeds the {self.grid_size()} distinct points of the '
        f'lists; allowed: 1..{self.grid_size()}'
      )

  def grid_size(self) -> int:
    return math.prod(len(v) for v in self.parameters.values() if isinstance(v, tuple))

  def points(self) -> list[Point]:
    """The sweep's points, in order: a grid's in row-major order of `parameters`, a random
    search's as drawn."""
    paths = list(self.parameters)
    if self.search == Search.GRID:
      lists = [cast(tuple[Any, ...], self.parameters[p]) for p in paths]  # no distributions
      combos = list(itertools.product(*lists))
    else:
      combos = self._draws(paths)
    names = point_names(paths, combos)
    return [Point(n, tuple(zip(paths, c))) for n, c in zip(names, combos)]

  def _draws(self, paths: list[str]) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(self.search_seed)
    assert self.num_points is not None
    combos: list[tuple[Any, ...]] = []
    seen: set[str] = set()
    attempts = 0
    while len(combos) < self.num_points:
      attempts += 1
      if attempts > 1000 * self.num_points:
        raise SweepError(
          f'--num_points={self.num_points}: cannot draw that many distinct points; allowed: '
          'fewer points or wider distributions'
        )
      combo = tuple(_draw(self.parameters[p], rng) for p in paths)
      if repr(combo) not in seen:
        seen.add(repr(combo))
        combos.append(combo)
    return combos


def _draw(values: Values, rng: np.random.Generator) -> Any:
  if isinstance(values, Distribution):
    return values.draw(rng)
  return values[int(rng.integers(len(values)))]


def _short_names(paths: Sequence[str]) -> list[str]:
  """Each path's shortest dotted suffix that no other path ends with ('learning_rate')."""
  names = []
  for path in paths:
    parts = path.split('.')
    for k in range(1, len(parts) + 1):
      suffix = '.'.join(parts[-k:])
      if not any(other != path and ('.' + other).endswith('.' + suffix) for other in paths):
        break
    names.append(suffix)
  return names


def _value_text(value: Any) -> str:
  text = value if isinstance(value, str) else repr(value)
  return re.sub(r'[^A-Za-z0-9._+-]+', '_', text).strip('_') or '_'


def point_names(paths: Sequence[str], combos: Sequence[Sequence[Any]]) -> list[str]:
  """Folder names of points: `<short name>=<value>` joined by ','; a name too long for a
  folder, or one two points would share, ends in a hash of the point's exact settings."""
  short = _short_names(paths)
  names = [','.join(f'{s}={_value_text(v)}' for s, v in zip(short, combo)) for combo in combos]
  result = []
  for name, combo in zip(names, combos):
    if len(name) > 120 or names.count(name) > 1:
      digest = hashlib.sha256(repr(tuple(zip(paths, combo))).encode()).hexdigest()[:10]
      name = f'{name[:100]}-{digest}'
    result.append(name)
  return result


_DISTRIBUTION = re.compile(r'(\w+)\((.*)\)')


def literal(text: str) -> Any:
  """A value as written on a command line: a Python literal, else the bare word as a string."""
  text = text.strip()
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def split_top_level(text: str) -> list[str]:
  """`text` split at the commas outside brackets and quotes ('0.1,(1,2),x' -> 3 items)."""
  items, depth, quote, start = [], 0, '', 0
  for i, char in enumerate(text):
    if quote:
      quote = '' if char == quote else quote
    elif char in '\'"':
      quote = char
    elif char in '([{':
      depth += 1
    elif char in ')]}':
      depth -= 1
    elif char == ',' and depth == 0:
      items.append(text[start:i])
      start = i + 1
  items.append(text[start:])
  return [item.strip() for item in items]


def parse_values(path: str, text: str) -> Values:
  """The values of `--sweep.<path>=<text>`: a comma list of literals, or one distribution
  `uniform(a,b)`, `log_uniform(a,b)`, `int_uniform(a,b)`."""
  match = _DISTRIBUTION.fullmatch(text.strip())
  if match and match.group(1) in Distribution.KINDS:
    bounds = [literal(b) for b in split_top_level(match.group(2))]
    if len(bounds) != 2 or not all(_is_number(b) for b in bounds):
      raise SweepError(
        f'--sweep.{path}={text}: allowed: {match.group(1)}(low,high) with two numbers'
      )
    try:
      return Distribution(match.group(1), float(bounds[0]), float(bounds[1]))
    except SweepError as error:
      raise SweepError(f'--sweep.{path}: {error}') from None
  if not text.strip():
    raise SweepError(f'--sweep.{path} is empty; allowed: a comma list of values')
  return tuple(literal(item) for item in split_top_level(text))


def _is_number(value: Any) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def file_values(path: str, value: Any) -> Values:
  """A `[sweep]` entry of a sweep file: a list of values, or a one-key table naming a
  distribution (`{log_uniform = [1e-3, 1e-1]}`)."""
  if isinstance(value, list):
    return tuple(tuple(v) if isinstance(v, list) else v for v in value)
  if isinstance(value, dict) and len(value) == 1:
    ((kind, bounds),) = value.items()
    if isinstance(bounds, list) and len(bounds) == 2 and all(map(_is_number, bounds)):
      try:
        return Distribution(kind, float(bounds[0]), float(bounds[1]))
      except SweepError as error:
        raise SweepError(f'[sweep] {path}: {error}') from None
  raise SweepError(
    f'[sweep] {path} = {value!r} is invalid; allowed: a list of values or a distribution '
    'table such as {log_uniform = [0.001, 0.1]}'
  )


FILE_KEYS = ('config', 'seeds', 'search', 'num_points', 'search_seed', 'set', 'sweep')


def read_file(path: str) -> dict[str, Any]:
  """A sweep file (TOML) as a dict of `FILE_KEYS`, its `[sweep]` values parsed
  (`file_values`).

  Raises:
    SweepError: the file cannot be read or parsed, or has a key outside `FILE_KEYS`.
  """
  try:
    with open(path, 'rb') as f:
      content = tomllib.load(f)
  except OSError as error:
    raise SweepError(
      f'--sweep_file={path} cannot be read ({error.strerror}); allowed: a readable TOML file'
    ) from None
  except tomllib.TOMLDecodeError as error:
    raise SweepError(
      f'--sweep_file={path} is not valid TOML ({error}); allowed: a TOML sweep file'
    ) from None
  unknown = sorted(set(content) - set(FILE_KEYS))
  if unknown:
    raise SweepError(f'--sweep_file={path}: unknown key {unknown[0]!r}; allowed: {list(FILE_KEYS)}')
  for table in ('set', 'sweep'):
    if not isinstance(content.get(table, {}), dict):
      raise SweepError(
        f'--sweep_file={path}: [{table}] is not a table; allowed: a table of "setting" = value'
      )
  content['sweep'] = {p: file_values(p, v) for p, v in content.get('sweep', {}).items()}
  return content
