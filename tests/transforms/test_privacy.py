"""DP clipping and noise: the fixed-denominator noised mean by hand, the noise's standard
deviation measured, adaptive clipping's step by hand."""

import jax
import numpy as np
import pytest

from fedsim_jax.transforms import privacy
from tests.transforms.helpers import batch, params_like, rows_of

pytestmark = pytest.mark.timeout(120)


def _run(transform, updates, width, clients=8, seed=0):
  state = transform.init(params_like(width), clients)
  out, state = transform.update(updates, state, jax.random.PRNGKey(seed))
  return rows_of(out), state


def test_central_mean_clips_and_divides_by_the_fixed_denominator():
  transform = privacy.dp_gaussian(1.0, 0.0, central=True, denominator=4)
  rows, state = _run(transform, batch([[3, 4], [0.3, 0.4]], padding=2), 2)
  # ((0.6, 0.8) + (0.3, 0.4)) / 4, whatever the number of rows that arrived.
  np.testing.assert_allclose(rows[:2], [[0.225, 0.3]] * 2, rtol=1e-6)
  np.testing.assert_allclose(rows[2:], 0.0)  # padding (weight 0) carries nothing
  assert int(state.releases) == 1


def test_central_noise_has_std_z_c_over_m():
  width = 40_000
  transform = privacy.dp_gaussian(2.0, 1.5, central=True, denominator=3)
  rows, _ = _run(transform, batch(np.zeros((1, width))), width)
  assert abs(rows.std() - 1.5 * 2.0 / 3) < 0.02 * (1.5 * 2.0 / 3)
  assert abs(rows.mean()) < 0.02


def test_local_noise_is_per_update_with_std_z_c():
  width = 20_000
  transform = privacy.dp_gaussian(0.5, 2.0, central=False)
  rows, state = _run(transform, batch(np.zeros((3, width)), clients=[1, 1, 4]), width)
  for row in rows:
    assert abs(row.std() - 1.0) < 0.03
  assert not np.allclose(rows[0], rows[1])  # independent draws
  assert state.client_releases.tolist() == [0, 2, 0, 0, 1, 0, 0, 0]
  assert state.accounted_releases(central=False) == 2


def test_adaptive_clipping_moves_the_norm_geometrically():
  adaptive = privacy.AdaptiveClipping(
    target_quantile=0.5, learning_rate=0.2, clipped_count_stddev=1e-9
  )
  transform = privacy.dp_gaussian(1.0, 0.0, central=True, denominator=4, adaptive=adaptive)
  # Norms 0.5, 2, 3, 4: one of four at most C = 1, so b = 1/4.
  _, state = _run(transform, batch([[0.3, 0.4], [0, 2], [3, 0], [0, 4]]), 2)
  np.testing.assert_allclose(float(state.clip_norm), np.exp(-0.2 * (0.25 - 0.5)), rtol=1e-5)


def test_update_noise_multiplier_by_hand():
  assert privacy.update_noise_multiplier(1.0, 5.0) == pytest.approx(1 / np.sqrt(1 - 0.01))
  with pytest.raises(ValueError, match='clipped_count_stddev'):
    privacy.update_noise_multiplier(1.0, 0.5)
