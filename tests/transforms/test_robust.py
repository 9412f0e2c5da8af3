"""Robust aggregators on hand-computable batches: known outliers removed, ties, f at its limit,
padding rows never counted."""

import numpy as np
import pytest

from fedsim_jax.transforms import robust
from tests.transforms.helpers import batch, params_like, rows_of

pytestmark = pytest.mark.timeout(120)


def _apply(transform, updates, width):
  state = transform.init(params_like(width), 8)
  out, state = transform.update(updates, state, __import__('jax').random.PRNGKey(0))
  return rows_of(out), state


def test_median_ignores_an_outlier_and_padding():
  updates = batch([[1, 10], [2, 20], [100, -5]], padding=2)
  rows, _ = _apply(robust.median(), updates, 2)
  np.testing.assert_allclose(rows[:3], [[2, 10]] * 3)
  np.testing.assert_allclose(rows[3:], 0.0)  # padding rows (weight 0) carry nothing


def test_median_of_an_even_count_averages_the_middle_pair():
  rows, _ = _apply(robust.median(), batch([[1, 0], [3, 8], [5, 2], [100, 4]]), 2)
  np.testing.assert_allclose(rows, [[4, 3]] * 4)


@pytest.mark.parametrize(
  ('beta', 'expected'),
  [(0.0, 22.0), (0.1, 22.0), (0.2, 3.0), (0.49, 3.0)],  # floor(beta x 5) = 0, 0, 1, 2 trimmed
)
def test_trimmed_mean_trims_floor_beta_n_at_each_end(beta, expected):
  updates = batch([[1, 1], [2, 1], [3, 1], [4, 1], [100, 1]], padding=3)
  rows, _ = _apply(robust.trimmed_mean(beta), updates, 2)
  np.testing.assert_allclose(rows[:5, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(rows[:5, 1], 1.0)


def test_trimmed_mean_refuses_half_or_more():
  with pytest.raises(ValueError, match='beta'):
    robust.trimmed_mean(0.5)


HONEST_AND_OUTLIER = [[0, 0], [1, 0], [0, 1], [1, 1], [100, 100]]


def test_krum_scores_by_hand():
  # f = 1, n = 5: each score sums the n - f - 2 = 2 smallest squared distances.
  values = np.asarray(HONEST_AND_OUTLIER, np.float32)
  scores = np.asarray(robust.krum_scores(values, np.ones(5, bool), 1))
  np.testing.assert_allclose(scores, [2, 2, 2, 2, 99**2 * 2 + 99**2 + 100**2])


def test_krum_picks_an_honest_update_with_ties_to_the_lowest_row():
  # n = 2f + 3 with f = 1: Krum at its limit.
  rows, _ = _apply(robust.multi_krum(1, 1), batch(HONEST_AND_OUTLIER, padding=3), 2)
  np.testing.assert_allclose(rows[:5], [[0, 0]] * 5)


def test_multi_krum_averages_the_best_m():
  rows, _ = _apply(robust.multi_krum(1, 4), batch(HONEST_AND_OUTLIER, padding=3), 2)
  np.testing.assert_allclose(rows[:5], [[0.5, 0.5]] * 5)


def test_norm_bounding_clips_only_long_updates():
  rows, _ = _apply(robust.norm_bounding(1.0), batch([[3, 4], [0.3, 0.4]]), 2)
  np.testing.assert_allclose(rows, [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)


def test_centered_clipping_steps_from_the_last_aggregate():
  import jax

  transform = robust.centered_clipping(1.0, iterations=1)
  state = transform.init(params_like(2), 4)
  out, state = transform.update(batch([[3, 4], [0, 0]], padding=1), state, jax.random.PRNGKey(0))
  # v = 0 + ((0.6, 0.8) + (0, 0)) / 2
  np.testing.assert_allclose(rows_of(out)[:2], [[0.3, 0.4]] * 2, rtol=1e-6)
  # The next batch starts from v = (0.3, 0.4): (3, 4) - v has norm 4.5, clipped to 1.
  out, state = transform.update(batch([[3, 4]]), state, jax.random.PRNGKey(1))
  np.testing.assert_allclose(rows_of(out), [[0.9, 1.2]], rtol=1e-6)


def test_centered_clipping_iterates():
  rows, _ = _apply(robust.centered_clipping(1.0, iterations=2), batch([[3, 4], [0, 0]]), 2)
  # Second iteration from (0.3, 0.4): offsets (2.7, 3.6) -> (0.6, 0.8) and (-0.3, -0.4).
  np.testing.assert_allclose(rows, [[0.45, 0.6]] * 2, rtol=1e-6)
