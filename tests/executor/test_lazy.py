"""Lazy federations: per-batch device blocks give the same client batches as eager data."""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest

from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import partitioners as partition
from fedsim_jax.data.federated import FederatedDataset, client_batch
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import ClientTask, Executor, round_up_to_bucket
from fedsim_jax.models import get_model

NUM_CLIENTS = 300_000
IMAGE = (28, 28, 1)


class _SyntheticImages:
  """`[N, 28, 28, 1]` uint8 images computed from their row number, never materialised.

  Pixels 0-2 hold the row's bytes, so a gathered image tells which example it is.
  """

  def __init__(self, num_examples: int):
    self.shape = (num_examples, *IMAGE)
    self.dtype = np.dtype(np.uint8)

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, rows) -> np.ndarray:
    rows = np.asarray(rows, np.int64)
    pixels = (rows[:, None] * 131 + np.arange(784) * 7) % 251
    pixels[:, 0], pixels[:, 1], pixels[:, 2] = rows & 255, (rows >> 8) & 255, (rows >> 16) & 255
    return pixels.astype(np.uint8).reshape(-1, *IMAGE)


def _row_ids(x: np.ndarray) -> np.ndarray:
  flat = np.asarray(x).reshape(len(x), -1).astype(np.int64)
  return flat[:, 0] | (flat[:, 1] << 8) | (flat[:, 2] << 16)


@pytest.fixture(scope='module')
def large_federation() -> LazyFederation:
  """300,000 clients of 1-20 examples (about 3.15M 28x28 images), stored client by client."""
  rng = np.random.default_rng(0)
  sizes = rng.integers(1, 21, NUM_CLIENTS)
  total = int(sizes.sum())
  labels = (np.arange(total) * 7 + np.arange(total) // 3) % 10
  test_x = _SyntheticImages(total + 10)[np.arange(total, total + 10)]
  return LazyFederation.from_client_sizes(
    'synthetic', _SyntheticImages(total), labels, sizes, test_x, np.arange(10) % 10, 10
  )


@functools.partial(jax.jit, static_argnames=('num_steps', 'batch_size', 'sampling'))
def _batches(data, client_ids, key, num_steps, batch_size, sampling):
  """Every client's batches for steps 0..num_steps-1: leaves [clients, steps, batch, ...]."""

  def one_client(client_id):
    return jax.vmap(lambda step: client_batch(data, client_id, step, key, batch_size, sampling))(
      np.arange(num_steps)
    )

  return jax.vmap(one_client)(client_ids)


def _assert_same_batches(a, b) -> None:
  for left, right in zip(a, b, strict=True):
    np.testing.assert_array_equal(np.asarray(left), np.asarray(right))


@pytest.mark.parametrize('sampling', ['shuffle', 'with_replacement'])
def test_gathered_block_matches_eager_restriction(large_federation, sampling) -> None:
  lazy = large_federation
  clients = np.sort(np.random.default_rng(1).choice(NUM_CLIENTS, 64, replace=False))
  block = lazy.gather(clients[::-1])  # any request order
  assert np.array_equal(block.clients, clients)
  assert np.array_equal(block.clients[block.local_ids], clients[::-1])

  # Device memory is bounded by the block: 64 clients, at most 64 * 20 examples (bucketed).
  sizes = lazy.client_sizes[clients]
  assert block.data.x.shape == (round_up_to_bucket(int(sizes.sum())), *IMAGE)
  assert block.data.y.shape == block.data.x.shape[:1]
  assert block.data.indices.shape == (64, lazy.max_client_size) == (64, 20)
  assert block.data.sizes.shape == (64,)
  assert sum(a.nbytes for a in jax.tree_util.tree_leaves(block.data)) < (
    round_up_to_bucket(64 * 20) * (784 + 4) + 64 * 21 * 4
  )

  # The eager federation of only these clients, built independently of `gather`.
  rows = [np.arange(lazy.client_offsets[c], lazy.client_offsets[c + 1]) for c in clients]
  all_rows = np.concatenate(rows)
  bounds = np.concatenate([[0], np.cumsum([r.size for r in rows])])
  eager = FederatedDataset.from_partition(
    'restricted',
    lazy.train_x[all_rows],
    lazy.train_y[all_rows],
    [np.arange(bounds[i], bounds[i + 1]) for i in range(64)],
    lazy.test_x,
    lazy.test_y,
    10,
  )
  key = jax.random.PRNGKey(7)
  local = np.arange(64, dtype=np.int32)
  lazy_batches = _batches(block.data, local, key, 6, 8, sampling)
  eager_batches = _batches(eager.device_arrays(), local, key, 6, 8, sampling)
  _assert_same_batches(lazy_batches, eager_batches)
  # And the examples are the right ones: each client's batches hold only its own rows.
  x, _, w = lazy_batches
  for i in range(len(clients)):
    seen = _row_ids(np.asarray(x[i]).reshape(-1, *IMAGE))[np.asarray(w[i]).reshape(-1) > 0]
    assert set(seen) <= set(rows[i].tolist())


def test_gather_is_deterministic_and_bucketed(large_federation) -> None:
  first = large_federation.gather([5, 299_999, 5, 12])
  again = large_federation.gather([5, 299_999, 5, 12])
  assert first.local_ids.tolist() == [0, 2, 0, 1]  # slots follow ascending client ids
  for a, b in zip(jax.tree_util.tree_leaves(first.data), jax.tree_util.tree_leaves(again.data)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert first.data.sizes.shape == (3,)
  assert (
    np.asarray(first.data.sizes).tolist()
    == large_federation.client_sizes[[5, 12, 299_999]].tolist()
  )
  twelve = large_federation.gather(np.arange(12))  # 12 clients: a bucket; 13 -> 14 slots
  assert twelve.data.sizes.shape == (12,)
  assert large_federation.gather(np.arange(13)).data.sizes.shape == (14,)


@pytest.mark.parametrize('sampling', ['shuffle', 'with_replacement'])
def test_memmap_blocks_match_the_full_eager_federation(tmp_path, sampling) -> None:
  rng = np.random.default_rng(2)
  labels = rng.integers(0, 10, 4000)
  x = rng.integers(0, 256, (4000, 5, 5, 1)).astype(np.uint8)
  np.save(tmp_path / 'x.npy', x)
  mapped = np.load(tmp_path / 'x.npy', mmap_mode='r')
  parts = partition.dirichlet(labels, 300, 0.3, seed=0, min_client_size=1)  # uneven, scattered
  lazy = LazyFederation.from_partition('mm', mapped, labels, parts, x[:5], labels[:5], 10)
  eager = lazy.to_federated_dataset()
  assert np.array_equal(eager.client_sizes, lazy.client_sizes)
  full = eager.device_arrays()
  key = jax.random.PRNGKey(3)
  for _ in range(2):
    requested = rng.integers(0, 300, 40)  # unsorted, with repeats
    block = lazy.gather(requested)
    lazy_batches = _batches(block.data, block.local_ids, key, 5, 16, sampling)
    eager_batches = _batches(full, requested.astype(np.int32), key, 5, 16, sampling)
    _assert_same_batches(lazy_batches, eager_batches)


def test_an_executor_on_a_lazy_federation_gives_the_eager_executors_results() -> None:
  fed = toy_federation(num_clients=9, seed=4)
  parts = [fed.client_indices[c, : fed.client_sizes[c]] for c in range(fed.num_clients)]
  lazy = LazyFederation.from_partition(
    'toy', fed.train_x, fed.train_y, parts, fed.test_x, fed.test_y, fed.num_classes
  )
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(8,))
  params = model.init(jax.random.PRNGKey(0))
  update = sgd_client_update(model, optax.sgd(0.1), 4)
  key = jax.random.PRNGKey(5)
  eager = Executor(update, fed.device_arrays(), key)
  lazy_executor = Executor(update, lazy, key)
  tasks = [
    ClientTask(client_id=c, num_steps=s, seed=i, start_params=params)
    for i, (c, s) in enumerate([(7, 3), (2, 5), (7, 1), (0, 4)])
  ]
  expected = eager.run(tasks)
  got = lazy_executor.run(tasks)
  assert got.num_tasks == 4 and lazy_executor.tasks_run == 4
  for a, b in zip(
    jax.tree_util.tree_leaves((expected.deltas, expected.aux)),
    jax.tree_util.tree_leaves((got.deltas, got.aux)),
  ):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
  assert len(lazy_executor.block_shapes) == 1


@pytest.mark.parametrize(
  'call',
  [
    lambda lazy: lazy.gather([]),
    lambda lazy: lazy.gather([3]),
    lambda lazy: lazy.gather([-1]),
    lambda lazy: LazyFederation.from_client_sizes(
      'x', np.zeros((4, 1)), np.zeros(4), [2, 3], np.zeros((1, 1)), np.zeros(1), 2
    ),
  ],
)
def test_invalid_inputs_raise_one_line(call) -> None:
  lazy = LazyFederation.from_client_sizes(
    'x', np.zeros((4, 1)), np.zeros(4), [1, 0, 3], np.zeros((1, 1)), np.zeros(1), 2
  )
  with pytest.raises(ValueError) as info:
    call(lazy)
  assert 'allowed' in str(info.value) and '\n' not in str(info.value)
