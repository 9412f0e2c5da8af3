"""`LazyFederation`: a federation whose examples stay on the host; each batch of client tasks
gets a compact device block holding only its own clients.

A `FederatedDataset` puts every training example and a `[num_clients, max_client_size]` index
table on the device. That does not fit for federations such as StackOverflow (342,477 clients,
Hard et al. 2024, Sec. 4.1; Reddi et al. 2021): federations too large for device memory
gather only the active clients. A `LazyFederation` keeps the examples on the host
(a numpy array, an `np.memmap`, or any array-like that supports `x[rows]` with an int64 index
array) and the client layout as a CSR table (`client_offsets` into `client_rows`), with no
padding. For a batch of tasks, `gather` copies just those clients' examples into a
`ClientDataArrays` block with a remapped index table, so `client_batch` (and the whole client
engine) runs on it unchanged inside jit.

A task's batches on the block are the same as on the eager `FederatedDataset` of the same
partition: client c's j-th slot holds the same example, and the block's index table has the
same width (the federation's largest client), so `client_batch`'s per-epoch orders are drawn
from the same shapes. A task's result therefore never depends on which other clients share its
block.

Block shapes are rounded up with `round_up_to_bucket` (number of clients and number of
examples), so a run compiles a few programs, not one per batch; device memory holds one block:
at most `num_distinct_clients * max_client_size` examples, rounded up.

An `Executor` given a `LazyFederation` as its data gathers each batch's block this way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from fedsim_jax.data.bucketing import round_up_to_bucket
from fedsim_jax.data.client_test import ClientTestSet
from fedsim_jax.data.federated import ClientDataArrays, FederatedDataset


@dataclasses.dataclass(frozen=True)
class GatheredClients:
  """A device block of some clients' data.

  Attributes:
    data: the block: `x [num_rows, ...]`, `y [num_rows]`, `indices [num_slots, max_client_size]`
      and `sizes [num_slots]`. Slots past `len(clients)` are empty padding clients (size 0);
      rows past the clients' examples are zeros and never sampled.
    clients: `[len(clients)]` the distinct federation client ids in the block, ascending; slot
      s of the block is client `clients[s]`.
    local_ids: `[len(client_ids)]` int32, the block slot of each requested client id, in the
      order they were requested.
  """

  data: ClientDataArrays
  clients: np.ndarray
  local_ids: np.ndarray


@dataclasses.dataclass(frozen=True)
class LazyFederation:
  """Per-client training data kept on the host, gathered per batch of tasks; plus a test split.

  Build one with `from_partition` (any partition) or `from_client_sizes` (examples already
  stored grouped by client, e.g. a natural split written client by client). It has the host
  attributes of `FederatedDataset` that the simulator reads (`num_clients`, `client_sizes`,
  `straggler_mask`, `input_shape`, `num_classes`, `test_x`, `test_y`), but no
  `device_arrays()`: use `gather` / `gather_tasks`, or give the federation itself to an `Executor`.

  Attributes:
    train_x: `[num_examples, *input_shape]` host array-like (numpy array, `np.memmap`, or an
      object with `shape`, `dtype` and `__getitem__(int64 rows) -> np.ndarray`).
    train_y: `[num_examples]` int32 labels (numpy).
    client_offsets: `[num_clients + 1]` int64; client c's examples are
      `client_rows[client_offsets[c]:client_offsets[c + 1]]`.
    client_rows: `[client_offsets[-1]]` int64 rows of `train_x`, or None when client c's
      examples are the contiguous rows `client_offsets[c]:client_offsets[c + 1]`.
    bucket_bits: significant bits kept when rounding block shapes up.
  """

  name: str
  train_x: Any
  train_y: np.ndarray
  client_offsets: np.ndarray
  client_rows: np.ndarray | None
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  straggler_mask: np.ndarray | None = None
  bucket_bits: int = 3
  client_test: ClientTestSet | None = None  # each client's own test examples (data.client_test)
  client_sizes: np.ndarray = dataclasses.field(init=False, repr=False)

  def __post_init__(self):
    offsets = np.asarray(self.client_offsets, np.int64)
    num_rows = len(self.train_x) if self.client_rows is None else len(self.client_rows)
    if (
      offsets.ndim != 1
      or offsets.size < 2
      or offsets[0] != 0
      or offsets[-1] != num_rows
      or np.any(np.diff(offsets) < 0)
    ):
      raise ValueError(
        f'client_offsets are invalid; allowed: a non-decreasing [num_clients + 1] array from 0 '
        f'to {num_rows} (the number of client rows)'
      )
    if len(self.train_y) != len(self.train_x):
      raise ValueError(
        f'train_y has {len(self.train_y)} labels for {len(self.train_x)} '
        'examples; allowed: one label per example'
      )
    if self.client_rows is not None:
      rows = np.asarray(self.client_rows, np.int64)
      if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= len(self.train_x))):
        raise ValueError(f'client_rows are invalid; allowed: rows in 0..{len(self.train_x) - 1}')
      object.__setattr__(self, 'client_rows', rows)
    if self.straggler_mask is not None:
      mask = np.asarray(self.straggler_mask, bool)
      if mask.shape != (offsets.size - 1,):
        raise ValueError(f'straggler_mask has shape {mask.shape}; allowed: ({offsets.size - 1},)')
      object.__setattr__(self, 'straggler_mask', mask)
    if (
      isinstance(self.bucket_bits, bool)
      or not isinstance(self.bucket_bits, int)
      or self.bucket_bits < 1
    ):
      raise ValueError(f'bucket_bits={self.bucket_bits!r} is invalid; allowed: integers >= 1')
    object.__setattr__(self, 'client_offsets', offsets)
    object.__setattr__(self, 'train_y', np.asarray(self.train_y, np.int32))
    object.__setattr__(self, 'client_sizes', np.diff(offsets).astype(np.int32))

  @classmethod
  def from_partition(
    cls,
    name: str,
    train_x: Any,
    train_y: np.ndarray,
    partition: Sequence[np.ndarray],
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    straggler_mask: np.ndarray | None = None,
    bucket_bits: int = 3,
    client_test: ClientTestSet | None = None,
  ) -> LazyFederation:
    """From `partition[c]`, the training-example rows of client c (kept in the given order)."""
    if not partition:
      raise ValueError('partition must hold at least one client')
    sizes = np.array([len(p) for p in partition], np.int64)
    rows = np.concatenate([np.asarray(p, np.int64) for p in partition])
    return cls(
      name=name,
      train_x=train_x,
      train_y=train_y,
      client_offsets=np.concatenate([[0], np.cumsum(sizes)]),
      client_rows=rows,
      test_x=test_x,
      test_y=test_y,
      num_classes=int(num_classes),
      straggler_mask=straggler_mask,
      bucket_bits=bucket_bits,
      client_test=client_test,
    )

  @classmethod
  def from_client_sizes(
    cls,
    name: str,
    train_x: Any,
    train_y: np.ndarray,
    client_sizes: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    straggler_mask: np.ndarray | None = None,
    bucket_bits: int = 3,
  ) -> LazyFederation:
    """From examples stored client by client: client c owns the next `client_sizes[c]` rows."""
    sizes = np.asarray(client_sizes, np.int64)
    if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 0):
      raise ValueError('client_sizes are invalid; allowed: a non-empty 1-D array of sizes >= 0')
    return cls(
      name=name,
      train_x=train_x,
      train_y=train_y,
      client_offsets=np.concatenate([[0], np.cumsum(sizes)]),
      client_rows=None,
      test_x=test_x,
      test_y=test_y,
      num_classes=int(num_classes),
      straggler_mask=straggler_mask,
      bucket_bits=bucket_bits,
    )

  @property
  def num_clients(self) -> int:
    return int(self.client_sizes.shape[0])

  @property
  def input_shape(self) -> tuple[int, ...]:
    return tuple(self.train_x.shape[1:])

  @property
  def max_client_size(self) -> int:
    """Width of every block's index table (as `FederatedDataset.client_indices`)."""
    return max(int(self.client_sizes.max()), 1)

  def client_rows_of(self, client_id: int) -> np.ndarray:
    """Rows of `train_x` of one client, in partition order."""
    start, stop = self.client_offsets[client_id], self.client_offsets[client_id + 1]
    if self.client_rows is None:
      return np.arange(start, stop, dtype=np.int64)
    return self.client_rows[start:stop]

  def client_examples(self, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Host-side `(x, y)` of one client, unpadded."""
    rows = self.client_rows_of(client_id)
    return np.asarray(self.train_x[rows]), self.train_y[rows]

  def gather(self, client_ids: Sequence[int] | np.ndarray) -> GatheredClients:
    """Copies the examples of `client_ids` (repeats allowed) into one device block."""
    ids = np.asarray(client_ids)
    if (
      ids.ndim != 1
      or ids.size == 0
      or not np.issubdtype(ids.dtype, np.integer)
      or ids.min() < 0
      or ids.max() >= self.num_clients
    ):
      raise ValueError(
        f'client_ids are invalid; allowed: a non-empty list of client ids in '
        f'0..{self.num_clients - 1}'
      )
    clients, local_ids = np.unique(ids.astype(np.int64), return_inverse=True)
    sizes = self.client_sizes[clients].astype(np.int64)
    local_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    positions = np.repeat(self.client_offsets[clients] - local_starts, sizes) + np.arange(total)
    rows = positions if self.client_rows is None else self.client_rows[positions]

    num_slots = round_up_to_bucket(clients.size, self.bucket_bits)
    num_rows = round_up_to_bucket(max(total, 1), self.bucket_bits)
    x = np.zeros((num_rows, *self.input_shape), self.train_x.dtype)
    x[:total] = self.train_x[rows]
    y = np.zeros(num_rows, np.int32)
    y[:total] = self.train_y[rows]
    width = self.max_client_size
    columns = np.arange(width)
    indices = np.zeros((num_slots, width), np.int32)
    indices[: clients.size] = np.where(columns < sizes[:, None], local_starts[:, None] + columns, 0)
    block_sizes = np.zeros(num_slots, np.int32)
    block_sizes[: clients.size] = sizes
    data = ClientDataArrays(
      x=jnp.asarray(x),
      y=jnp.asarray(y),
      indices=jnp.asarray(indices),
      sizes=jnp.asarray(block_sizes),
    )
    return GatheredClients(data=data, clients=clients, local_ids=local_ids.astype(np.int32))

  def gather_tasks(self, tasks: Sequence[Any]) -> tuple[ClientDataArrays, list[Any]]:
    """The block of `tasks`' clients, and the tasks renumbered to their block slots.

    `tasks` are dataclasses with a `client_id` field (`executor.ClientTask`); row i of the
    result is `tasks[i]` with `client_id` replaced by its slot in the block.
    """
    block = self.gather([task.client_id for task in tasks])
    return block.data, [
      dataclasses.replace(task, client_id=int(slot)) for task, slot in zip(tasks, block.local_ids)
    ]

  def to_federated_dataset(self) -> FederatedDataset:
    """The eager `FederatedDataset` of the same partition (small federations and tests)."""
    partition = [self.client_rows_of(c) for c in range(self.num_clients)]
    return FederatedDataset.from_partition(
      self.name,
      np.asarray(self.train_x),
      self.train_y,
      partition,
      self.test_x,
      self.test_y,
      self.num_classes,
      self.straggler_mask,
    )
