"""Attackers: the malicious set is the run's, and only their real rows are tampered with."""

import jax
import numpy as np
import pytest

from fedsim_jax.transforms import attacks
from tests.transforms.helpers import batch, params_like, rows_of

pytestmark = pytest.mark.timeout(120)


def test_the_malicious_set_is_a_fixed_fraction_drawn_from_the_seed():
  first = attacks.malicious_clients(50, 0.2, 3)
  assert first.sum() == 10
  np.testing.assert_array_equal(first, attacks.malicious_clients(50, 0.2, 3))
  assert not np.array_equal(first, attacks.malicious_clients(50, 0.2, 4))


@pytest.mark.parametrize(
  ('transform', 'expected'),
  [
    (lambda m: attacks.sign_flip(m, 2.0), [[1, 2], [-6, -8], [5, 6]]),
    (lambda m: attacks.scaling(m, 10.0), [[1, 2], [30, 40], [5, 6]]),
  ],
)
def test_only_malicious_clients_rows_change(transform, expected):
  malicious = np.array([False, True, False, True])
  updates = batch([[1, 2], [3, 4], [5, 6]], clients=[0, 1, 2], padding=1)
  updates = updates.replace(client_id=updates.client_id.at[3].set(3))  # padding of a malicious id
  t = transform(malicious)
  out, _ = t.update(updates, t.init(params_like(2), 4), jax.random.PRNGKey(0))
  np.testing.assert_allclose(rows_of(out)[:3], expected)
  np.testing.assert_allclose(rows_of(out)[3], 1e6)


def test_gaussian_attack_replaces_the_update_by_noise():
  malicious = np.array([True, False])
  t = attacks.gaussian_updates(malicious, 3.0)
  out, _ = t.update(
    batch(np.ones((2, 5000)), clients=[0, 1]), t.init(params_like(5000), 2), jax.random.PRNGKey(0)
  )
  rows = rows_of(out)
  assert abs(rows[0].std() - 3.0) < 0.1 and abs(rows[0].mean()) < 0.15
  np.testing.assert_allclose(rows[1], 1.0)


def test_label_flip_poisons_only_malicious_clients_examples():
  labels = np.array([0, 1, 2, 3, 9])
  owners = np.array([0, 1, 1, -1, 0])
  malicious = np.array([False, True])
  np.testing.assert_array_equal(attacks.flip_labels(labels, owners, malicious, 10), [0, 8, 7, 3, 9])
