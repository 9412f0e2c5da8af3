"""`FederatedDataset`: a federation's training examples split over clients, plus a test split.

Client data is stored once, as a flat example array, with a padded per-client index table
`client_indices [num_clients, max_client_size]` and `client_sizes [num_clients]`. This is the
padded per-client layout (docs/design-notes.md, "Client data layout") with the padding on int32 indices rather than on the
examples themselves, so a skewed partition (one client with 30x the median size) costs no
copies of the images. Batches are sampled inside jit from these arrays (`client_batch`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.data.client_test import ClientTestSet
from fedsim_jax.str_enum import StrEnum


class Sampling(StrEnum):
  """How a client's local batches are drawn (`client.sampling`)."""

  SHUFFLE = 'shuffle'  # a reshuffled pass per epoch, full batches of min(B, n) across epochs
  EPOCHS = 'epochs'  # each epoch its own ceil(n / B) batches, the last one partial
  WITH_REPLACEMENT = 'with_replacement'  # every batch drawn uniformly with replacement


SAMPLING_MODES = tuple(mode.value for mode in Sampling)


def steps_per_epoch(num_examples: int, batch_size: int, sampling: str = 'shuffle') -> float:
  """Local steps that pass once over a client's `num_examples` examples under `sampling`.

  'epochs' splits every epoch into ceil(n / B) batches, the last one partial, so a pass is
  ceil(n / B) steps. 'shuffle' and 'with_replacement' draw full batches of min(B, n) examples
  from a repeated stream, so a pass is n / min(B, n) steps: n / B, or one step for a client
  smaller than the batch (each of its steps reads all of its examples). An empty client counts
  as one example (its single step has weight 0).
  """
  if sampling not in SAMPLING_MODES:
    raise ValueError(f'client.sampling={sampling!r}; allowed: {SAMPLING_MODES}')
  size = max(int(num_examples), 1)
  if sampling == Sampling.EPOCHS:
    return float(-(-size // batch_size))
  return size / min(batch_size, size)


def steps_for_epochs(
  epochs: float, num_examples: int, batch_size: int, sampling: str = 'shuffle'
) -> int:
  """Steps of `epochs` local epochs: ceil(epochs x `steps_per_epoch`), at least 1.

  Every pass over the data is at least one batch, as in McMahan et al.'s ClientUpdate (E passes
  over the client's batches). Fractional epochs run the fraction's share of a pass, rounded up.
  """
  per_epoch = steps_per_epoch(num_examples, batch_size, sampling)
  # Rounded first so that, e.g., 0.3 epochs of 10 steps is 3 steps, not ceil(3.0000000000000004).
  return max(1, math.ceil(round(epochs * per_epoch, 9)))


@flax.struct.dataclass
class ClientDataArrays:
  """Device-side arrays of a federation, passed as jit arguments (never closed over).

  Attributes:
    x: `[num_examples, *input_shape]` all clients' training inputs, stored dtype (e.g. uint8).
    y: `[num_examples]` int32 labels.
    indices: `[num_clients, max_client_size]` int32 rows of `x`; entries past a client's size
      are padding (0) and are never sampled.
    sizes: `[num_clients]` int32 number of examples per client.
  """

  x: jax.Array
  y: jax.Array
  indices: jax.Array
  sizes: jax.Array


@dataclasses.dataclass(frozen=True)
class FederatedDataset:
  """Per-client training data (padded index table + sizes) and a central test split.

  Build one with `FederatedDataset.from_partition`. Host-side arrays are numpy; call
  `device_arrays()` for the jit-ready `ClientDataArrays`.
  """

  name: str
  train_x: np.ndarray
  train_y: np.ndarray
  client_indices: np.ndarray
  client_sizes: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  straggler_mask: np.ndarray | None = None  # [num_clients] bool, from straggler-aware splits
  client_test: ClientTestSet | None = None  # each client's own test examples (data.client_test)

  @classmethod
  def from_partition(
    cls,
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    partition: Sequence[np.ndarray],
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    straggler_mask: np.ndarray | None = None,
    client_test: ClientTestSet | None = None,
  ) -> FederatedDataset:
    """Builds a federation from `partition[c]`, the training-example indices of client c."""
    if not partition:
      raise ValueError('partition must hold at least one client')
    sizes = np.array([len(p) for p in partition], np.int32)
    indices = np.zeros((len(partition), max(int(sizes.max()), 1)), np.int32)
    for c, rows in enumerate(partition):
      indices[c, : len(rows)] = rows
    return cls(
      name=name,
      train_x=train_x,
      train_y=np.asarray(train_y, np.int32),
      client_indices=indices,
      client_sizes=sizes,
      test_x=test_x,
      test_y=np.asarray(test_y, np.int32),
      num_classes=int(num_classes),
      straggler_mask=None if straggler_mask is None else np.asarray(straggler_mask, bool),
      client_test=client_test,
    )

  @property
  def num_clients(self) -> int:
    return int(self.client_sizes.shape[0])

  @property
  def input_shape(self) -> tuple[int, ...]:
    return tuple(self.train_x.shape[1:])

  def client_examples(self, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Host-side `(x, y)` of one client, unpadded."""
    rows = self.client_indices[client_id, : self.client_sizes[client_id]]
    return self.train_x[rows], self.train_y[rows]

  def padded_client_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Materialised `(x [C, L, ...], y [C, L], sizes [C])`, padded with example 0.

    Convenient for small federations and tests; the simulator itself gathers from the index
    table instead.
    """
    return (self.train_x[self.client_indices], self.train_y[self.client_indices], self.client_sizes)

  def device_arrays(self) -> ClientDataArrays:
    return ClientDataArrays(
      x=jnp.asarray(self.train_x),
      y=jnp.asarray(self.train_y),
      indices=jnp.asarray(self.client_indices),
      sizes=jnp.asarray(self.client_sizes),
    )


def _epoch_order(key: jax.Array, epoch: jax.Array, size: jax.Array, length: int) -> jax.Array:
  """A uniformly random order of slots `0..size-1` (padding slots sorted last)."""
  u = jax.random.uniform(jax.random.fold_in(key, epoch), (length,))
  u = jnp.where(jnp.arange(length) < size, u, 2.0)
  return jnp.argsort(u)


def client_batch(
  data: ClientDataArrays,
  client_id: jax.Array,
  step: jax.Array,
  key: jax.Array,
  batch_size: int,
  sampling: str = 'shuffle',
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The mini-batch a client uses at local step `step`, sampled inside jit.

  `shuffle` reads the client's examples epoch by epoch, each epoch in a fresh random order
  (a batch may straddle two epochs), like `shuffle -> repeat -> batch` pipelines.
  `epochs` reads them the same way but splits each epoch into its own batches, the last one
  partial (n mod B examples), like a PyTorch `DataLoader(shuffle=True)` and McMahan et al.'s
  ClientUpdate. `with_replacement` draws each example uniformly at random. A client with fewer
  examples than `batch_size` uses all of its examples once per step; the unused batch slots
  (and a partial batch's) get weight 0.

  Stateless: every call sorts the epoch orders it reads. Loops over a task's steps use
  `BatchCursor` instead, which returns the same batches and sorts each epoch once.

  Returns:
    `(x [batch_size, ...], y [batch_size], weights [batch_size])`; the loss must be weighted.
  """
  cursor = BatchCursor.start(
    data,
    client_id,
    key,
    batch_size,
    sampling,
    first_epoch=_first_epoch(data, client_id, step, batch_size, sampling),
  )
  return cursor.batch(data, step)[0]


# Modes that read each epoch in a sorted random order (the cursor caches the orders).
_ORDERED_MODES = (Sampling.SHUFFLE, Sampling.EPOCHS)


def _sort_size(data: ClientDataArrays, client_id: jax.Array) -> jax.Array:
  """The client's size as the sampler uses it: an empty client reads slot 0 (weight 0)."""
  return jnp.maximum(data.sizes[client_id], 1)


def _first_epoch(
  data: ClientDataArrays, client_id: jax.Array, step: jax.Array, batch_size: int, sampling: str
) -> jax.Array:
  """The epoch of the first example of step `step`'s batch."""
  size = _sort_size(data, client_id)
  if sampling == Sampling.EPOCHS:
    return step // _batches_per_epoch(size, batch_size)
  return (step * jnp.minimum(batch_size, size)) // size


def _batches_per_epoch(size: jax.Array, batch_size: int) -> jax.Array:
  """ceil(size / batch_size): an 'epochs' epoch's batches, the last one partial."""
  return (size + batch_size - 1) // batch_size


@flax.struct.dataclass
class BatchCursor:
  """A client's batch sampler within one task: `batch(data, step)` returns `client_batch`'s
  batch for `step` and the cursor for the next step.

  With `shuffle` (and `epochs`) it holds the order of the current epoch and, once a batch has
  reached into it, the next one's (a batch reads at most these two). It sorts an order only when a batch first
  reads an epoch: once per epoch instead of twice per step, and a task whose batches stay in
  one epoch sorts once (on XLA:CPU a 14,000-slot sort takes about 3.7 ms, as long as ten B = 32
  MLP steps: large silos with short tasks were mostly sorting). Steps must be visited in
  increasing order from the step the cursor was started at (a batch never starts more than one
  epoch after the previous one). Inside `vmap` the epoch test becomes a select, so a sort runs
  every step, still once instead of twice.
  """

  client_id: jax.Array
  key: jax.Array
  epoch: jax.Array  # epoch of `current` (unused with `with_replacement`)
  current: jax.Array | None  # [length] slot order of `epoch`
  following: jax.Array | None  # [length] slot order of `epoch + 1` once `ready`
  ready: jax.Array | None  # whether `following` holds that order yet
  batch_size: int = flax.struct.field(pytree_node=False)
  sampling: str = flax.struct.field(pytree_node=False)

  @classmethod
  def start(
    cls,
    data: ClientDataArrays,
    client_id: jax.Array,
    key: jax.Array,
    batch_size: int,
    sampling: str = 'shuffle',
    first_epoch: jax.Array | int = 0,
  ) -> BatchCursor:
    """A cursor whose next batch starts in `first_epoch` (0: a task's first step)."""
    if sampling not in SAMPLING_MODES:
      raise ValueError(f'client.sampling={sampling!r}; allowed: {SAMPLING_MODES}')
    client_id = jnp.asarray(client_id, jnp.int32)
    epoch = jnp.asarray(first_epoch, jnp.int32)
    current = following = ready = None
    if sampling in _ORDERED_MODES:
      size, length = _sort_size(data, client_id), data.indices.shape[1]
      current = _epoch_order(key, epoch, size, length)
      following, ready = current, jnp.asarray(False)  # sorted when a batch first reaches it
    return cls(
      client_id=client_id,
      key=key,
      epoch=epoch,
      current=current,
      following=following,
      ready=ready,
      batch_size=batch_size,
      sampling=sampling,
    )

  def batch(
    self, data: ClientDataArrays, step: jax.Array
  ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], BatchCursor]:
    """`(client_batch(...) for step, cursor for the steps after it)`."""
    client_id, batch_size = self.client_id, self.batch_size
    size = _sort_size(data, client_id)
    effective = jnp.minimum(batch_size, size)
    slots = jnp.arange(batch_size)
    cursor = self
    used = slots < effective
    if self.sampling == Sampling.SHUFFLE:
      position = step * effective + slots
      # Every slot is read (padding slots too, at weight 0), so the last one decides whether
      # the next epoch's order is needed.
      cursor = self._prepare(data, position[0] // size, position[-1] // size)
      current, following, _ = cursor._shuffle_orders()
      within = position % size
      slot = jnp.where(position // size == cursor.epoch, current[within], following[within])
    elif self.sampling == Sampling.EPOCHS:
      per_epoch = _batches_per_epoch(size, batch_size)
      epoch = step // per_epoch
      within = (step % per_epoch) * batch_size + slots
      used = within < size  # the epoch's last batch is partial
      cursor = self._prepare(data, epoch, epoch)
      current, _, _ = cursor._shuffle_orders()
      slot = current[jnp.minimum(within, size - 1)]
    else:
      slot = jax.random.randint(jax.random.fold_in(self.key, step), (batch_size,), 0, size)
    rows = data.indices[client_id, slot]
    weights = (used & (data.sizes[client_id] > 0)).astype(jnp.float32)
    return (data.x[rows], data.y[rows], weights), cursor

  def _prepare(
    self, data: ClientDataArrays, first_epoch: jax.Array, last_epoch: jax.Array
  ) -> BatchCursor:
    """The cursor for a batch reading epochs `first_epoch..last_epoch`: `epoch` is
    `first_epoch` (the same one or the next) and `following` is ready if `last_epoch` is later.

    At most one order is sorted. It is either the new current epoch's, when the batch starts
    in an epoch no earlier batch reached, or the next epoch's. Both at once cannot happen: an
    unread next epoch means the previous batch ended exactly at the boundary (padding slots
    read on, and `batch_size >= effective`), so this batch starts the epoch and, having at most
    `size` effective slots, ends in it.
    """
    old_current, old_following, old_ready = self._shuffle_orders()
    advance = first_epoch > self.epoch
    epoch = jnp.where(advance, self.epoch + 1, self.epoch)
    ready = old_ready & ~advance  # `following` after a shift is not yet known
    need_current = advance & ~old_ready
    need_following = (last_epoch > epoch) & ~ready
    sort_epoch = jnp.where(need_current, epoch, epoch + 1)
    size, length = _sort_size(data, self.client_id), data.indices.shape[1]
    new = jax.lax.cond(
      need_current | need_following,
      lambda: _epoch_order(self.key, sort_epoch, size, length),
      lambda: old_current,
    )
    current = jnp.where(advance, jnp.where(old_ready, old_following, new), old_current)
    following = jnp.where(need_following, new, old_following)
    # `replace` is added by flax.struct.dataclass at run time, unknown to type checkers.
    return self.replace(  # type: ignore[attr-defined]
      epoch=epoch, current=current, following=following, ready=ready | need_following
    )

  def _shuffle_orders(self) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`(current, following, ready)`: the epoch orders every 'shuffle' or 'epochs' cursor holds."""
    if self.current is None or self.following is None or self.ready is None:
      raise ValueError(f'a sampling={self.sampling!r} cursor holds no epoch orders')
    return self.current, self.following, self.ready
