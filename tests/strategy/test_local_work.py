"""Local epochs as steps: E passes over a client's data, each at least one batch, under every
sampling mode, checked against the examples the sampler actually reads."""

import jax
import numpy as np
import pytest

from fedsim_jax.algorithms.fedasmu.fetch import FixedFetch
from fedsim_jax.algorithms.fedasmu.scheduler import FedasmuScheduler
from fedsim_jax.data import FederatedDataset
from fedsim_jax.data.federated import client_batch, steps_for_epochs, steps_per_epoch
from fedsim_jax.strategy import LocalWork


@pytest.mark.parametrize(
  'epochs, n, batch, shuffle_steps, epoch_steps',
  [
    (3, 2, 32, 3, 3),  # n < B: each step reads all n examples, so one step per epoch
    (3, 10, 32, 3, 3),
    (3, 32, 32, 3, 3),  # n = B
    (3, 100, 32, 10, 12),  # 300 / 32 full batches; 3 x (32, 32, 32, 4)
    (1, 100, 32, 4, 4),
    (3, 64, 32, 6, 6),  # n a multiple of B: both readings agree
    (0.5, 100, 32, 2, 2),  # fractional E: half a pass, rounded up
    (2.5, 10, 32, 3, 3),  # n < B: 2.5 passes of one step each
    (0.3, 100, 10, 3, 3),  # 0.3 x 10 steps, not ceil(3.0000000000000004)
    (0.01, 100, 32, 1, 1),  # at least one step
    (3, 0, 32, 3, 3),  # an empty client: its steps have weight 0
  ],
)
def test_steps_for_epochs(epochs, n, batch, shuffle_steps, epoch_steps):
  assert LocalWork(epochs=epochs, batch_size=batch).num_steps(n) == shuffle_steps
  assert LocalWork(epochs=epochs, batch_size=batch, sampling='with_replacement').num_steps(n) == (
    shuffle_steps
  )
  assert LocalWork(epochs=epochs, batch_size=batch, sampling='epochs').num_steps(n) == epoch_steps


def test_small_clients_train_every_epoch():
  """The defect this rule fixes: 3 epochs on 2 examples with B = 32 used to be one step."""
  assert LocalWork(epochs=3, batch_size=32).num_steps(2) == 3
  assert [LocalWork(epochs=3, batch_size=32).num_steps(n) for n in range(1, 11)] == [3] * 10


def test_steps_per_epoch_rejects_an_unknown_sampling_mode():
  with pytest.raises(ValueError, match='client.sampling'):
    steps_per_epoch(10, 4, 'bootstrap')


def test_time_limit_caps_epoch_steps():
  class Latency:
    def steps_within(self, limit, includes_overhead):
      return 2

  assert LocalWork(epochs=3, batch_size=32, time_limit=5.0).num_steps(10, Latency()) == 2


def _slot_counts(n, batch, steps, sampling):
  """How often each of a client's `n` examples is read (at weight 1) in `steps` steps."""
  # Example i of the client has label i, so labels identify the examples read.
  x = np.zeros((n, 1), np.float32)
  y = np.arange(n, dtype=np.int32)
  fed = FederatedDataset.from_partition('t', x, y, [np.arange(n)], x[:1], y[:1], n)
  data = fed.device_arrays()
  key = jax.random.PRNGKey(7)
  counts = np.zeros((steps, n), np.int64)
  for step in range(steps):
    _, labels, weights = jax.jit(client_batch, static_argnums=(4, 5))(
      data, 0, step, key, batch, sampling
    )
    np.add.at(counts[step], np.asarray(labels)[np.asarray(weights) > 0], 1)
  return counts


@pytest.mark.parametrize('n, batch', [(2, 32), (32, 32), (40, 32), (100, 32), (7, 3)])
@pytest.mark.parametrize('epochs', [1, 3])
def test_epochs_sampling_reads_each_example_once_per_epoch(n, batch, epochs):
  steps = steps_for_epochs(epochs, n, batch, 'epochs')
  counts = _slot_counts(n, batch, steps, 'epochs')
  per_epoch = steps // epochs
  for epoch in range(epochs):
    seen = counts[epoch * per_epoch : (epoch + 1) * per_epoch].sum(axis=0)
    np.testing.assert_array_equal(seen, np.ones(n))  # one pass: every example exactly once
  # The last batch of an epoch is the partial one.
  assert counts[per_epoch - 1].sum() == n - (per_epoch - 1) * batch


@pytest.mark.parametrize('n, batch', [(2, 32), (32, 32), (40, 32), (100, 32), (7, 3)])
@pytest.mark.parametrize('epochs', [1, 3, 2.5])
def test_shuffle_steps_cover_the_epochs(n, batch, epochs):
  """Under 'shuffle' the steps read at least E passes' worth of examples, and less than one
  more batch beyond it; a client smaller than the batch reads every example once per step."""
  steps = steps_for_epochs(epochs, n, batch, 'shuffle')
  counts = _slot_counts(n, batch, steps, 'shuffle')
  read = counts.sum()
  assert epochs * n <= read < epochs * n + min(batch, n)
  if n <= batch:
    np.testing.assert_array_equal(counts, np.ones((steps, n)))
  # Whole passes come first: after floor(E) epochs' steps every example was read floor(E) times.
  whole = int(epochs)
  whole_steps = int(np.ceil(whole * n / min(batch, n)))
  assert counts[:whole_steps].sum(axis=0).min() >= whole


def _fetch_step(n, batch, sampling, fetch_epoch, epochs=3):
  work = LocalWork(epochs=epochs, batch_size=batch, sampling=sampling)
  scheduler = FedasmuScheduler(1.0, 1, 1, work, tau=5, fetch_policy=FixedFetch(0.5))
  return scheduler._fetch_step(n, fetch_epoch, work.num_steps(n))


@pytest.mark.parametrize(
  'n, batch, sampling, expected',
  [
    (10, 32, 'shuffle', 2),  # n < B: epochs 1..2 are steps 1..2 of 3 (was 1)
    (100, 32, 'shuffle', 7),  # ceil(200 / 32) of 10
    (100, 32, 'epochs', 8),  # 2 x 4 of 12
    (64, 32, 'shuffle', 4),
  ],
)
def test_fedasmu_fetch_step_ends_the_fetch_epoch(n, batch, sampling, expected):
  assert _fetch_step(n, batch, sampling, fetch_epoch=2) == expected
