"""Each client's own test data, for per-client (federated) evaluation.

Three sources (`data.client_test`):

* `held_out`: a fraction of each client's own partition, removed from its training data
  (floor(fraction x n) examples of a client with n, at least one when n >= 2, never all of
  them), drawn by a stream of the partition seed, so the same federation holds out the same
  examples in every run;
* `label_matched`: `examples` examples from the central test split with the client's label
  distribution (counts by largest remainder, drawn without replacement within the client), the
  usual choice when the partition is synthetic and the clients' data is too small to split;
* `natural`: the test examples of the client's natural id (writer, speaking role) in datasets
  that have them (LEAF-style natural splits: partition `natural`).

The examples are stored flat, grouped by client (`ClientTestSet`); the evaluator gathers the
rows of the clients it evaluates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fedsim_jax.str_enum import StrEnum

# The held-out split's and the label-matched draw's own stream of the partition seed, so that
# neither changes any other draw of the run ('client test' in ASCII).
_STREAM = 0x636C69656E74


class ClientTestData(StrEnum):
  """Where each client's test examples come from (`data.client_test`)."""

  NONE = 'none'
  HELD_OUT = 'held_out'
  LABEL_MATCHED = 'label_matched'
  NATURAL = 'natural'


@dataclasses.dataclass(frozen=True)
class ClientTestSet:
  """Every client's test examples, stored flat and grouped by client.

  Attributes:
    x: `[M, *input_shape]` test inputs, client 0's first.
    y: `[M]` (or `[M, T]`) labels.
    offsets: `[num_clients + 1]` int64: client c's examples are rows `offsets[c]:offsets[c+1]`.
    source: the `ClientTestData` they came from.
  """

  x: np.ndarray
  y: np.ndarray
  offsets: np.ndarray
  source: str

  @classmethod
  def from_rows(
    cls, x: np.ndarray, y: np.ndarray, rows: Sequence[np.ndarray], source: str
  ) -> ClientTestSet:
    """From `rows[c]`, the rows of `x` and `y` that are client c's test examples."""
    sizes = np.array([len(r) for r in rows], np.int64)
    flat = np.concatenate([np.asarray(r, np.int64) for r in rows]) if rows else np.zeros(0, int)
    return cls(x[flat], np.asarray(y)[flat], np.concatenate([[0], np.cumsum(sizes)]), source)

  @property
  def num_clients(self) -> int:
    return len(self.offsets) - 1

  @property
  def sizes(self) -> np.ndarray:
    """`[num_clients]` test examples per client."""
    return np.diff(self.offsets)

  def rows(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of `x`, position in `clients` of each row's client) of `clients`' examples."""
    starts, ends = self.offsets[clients], self.offsets[clients + 1]
    rows = [np.arange(s, e) for s, e in zip(starts, ends)]
    owner = np.repeat(np.arange(len(clients)), ends - starts)
    return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), owner


def _rng(seed: int) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence([seed, _STREAM]))


def hold_out(
  parts: Sequence[np.ndarray], fraction: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Splits each client's rows into (training rows, held-out test rows).

  A client with n examples holds out floor(fraction x n) of them, at least one when n >= 2 and
  at most n - 1; its training rows keep their order.
  """
  if not 0.0 < fraction < 1.0:
    raise ValueError(f'fraction={fraction!r}; allowed: a number in (0, 1)')
  rng = _rng(seed)
  train, test = [], []
  for rows in parts:
    rows = np.asarray(rows, np.int64)
    n = len(rows)
    count = min(max(int(np.floor(fraction * n)), 1 if n >= 2 else 0), max(n - 1, 0))
    chosen = np.zeros(n, bool)
    chosen[rng.permutation(n)[:count]] = True
    train.append(rows[~chosen])
    test.append(np.sort(rows[chosen]))
  return train, test


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
  """Integer counts summing to `total` in proportion to `weights` (largest remainders get the
  rounding; ties to the lower index)."""
  weights = np.asarray(weights, np.float64)
  if total <= 0 or weights.sum() <= 0:
    return np.zeros(len(weights), np.int64)
  exact = weights / weights.sum() * total
  counts = np.floor(exact).astype(np.int64)
  remainder = exact - counts
  order = np.lexsort((np.arange(len(weights)), -remainder))
  counts[order[: total - counts.sum()]] += 1
  return counts


def label_matched(
  parts: Sequence[np.ndarray],
  train_y: np.ndarray,
  test_y: np.ndarray,
  num_classes: int,
  examples: int,
  seed: int,
) -> list[np.ndarray]:
  """Per client, rows of the central test split with the client's label distribution:
  `examples` rows (fewer where a class has fewer test examples), none for an empty client."""
  train_y, test_y = np.asarray(train_y), np.asarray(test_y)
  if train_y.ndim != 1 or test_y.ndim != 1:
    raise ValueError('label_matched needs one class label per example; allowed: held_out')
  rng = _rng(seed)
  by_class = [np.flatnonzero(test_y == c) for c in range(num_classes)]
  tests = []
  for rows in parts:
    counts = largest_remainder(np.bincount(train_y[rows], minlength=num_classes), examples)
    drawn = [
      rng.choice(by_class[c], size=min(int(k), len(by_class[c])), replace=False)
      for c, k in enumerate(counts)
      if k > 0
    ]
    tests.append(np.sort(np.concatenate(drawn)) if drawn else np.zeros(0, np.int64))
  return tests


def natural_test_rows(
  parts: Sequence[np.ndarray], train_client_ids: np.ndarray, test_client_ids: np.ndarray
) -> list[np.ndarray]:
  """Per client, the test rows of its natural id (that of its training examples)."""
  order = np.argsort(test_client_ids, kind='stable')
  ids = test_client_ids[order]
  tests = []
  for rows in parts:
    if len(rows) == 0:
      tests.append(np.zeros(0, np.int64))
      continue
    owner = train_client_ids[rows[0]]
    start, end = np.searchsorted(ids, owner, 'left'), np.searchsorted(ids, owner, 'right')
    tests.append(np.sort(order[start:end]))
  return tests
