"""FedScale-style latency: 3 * batch * seconds_per_sample per step, bytes / bandwidth comm."""

import numpy as np
import pytest

from fedsim_jax.runtime.latency.fedscale import FedScaleLatency, synthetic_device_profiles


def _model(**kwargs):
  settings = dict(
    batch_size=16,
    seconds_per_sample=np.array([0.01, 0.05]),
    bandwidth=np.array([1e6, 2.5e5]),
    model_bytes=4_000_000,
  )
  settings.update(kwargs)
  return FedScaleLatency(2, np.random.default_rng(0), **settings)


def test_formula_exact():
  model = _model()
  assert model.sample(0) == (8.0, 0.0, 3 * 16 * 0.01)
  assert model.sample(1) == (32.0, 0.0, 3 * 16 * 0.05)
  assert model.sample(1).duration(10) == pytest.approx(32.0 + 10 * 2.4)
  assert model.expected_step_time(1) == pytest.approx(2.4)
  assert model.download_time(0) == 4.0


def test_upload_bandwidth_and_scale():
  model = _model(upload_bandwidth=np.array([5e5, 5e5]), bandwidth_scale=1 / 50)
  assert model.sample(0).communication == pytest.approx(50 * (4.0 + 8.0))
  assert model.download_time(0) == pytest.approx(200.0)


def test_scalar_profiles_apply_to_all():
  model = _model(seconds_per_sample=0.02, bandwidth=1e6)
  assert model.sample(0) == model.sample(1)


def test_deterministic_without_jitter_draws_nothing():
  model = _model()
  state = model.rng.bit_generator.state
  model.sample(0)
  assert model.rng.bit_generator.state == state


def test_jitter_statistics_and_seed():
  model = _model(jitter=0.1)
  draws = [model.sample(0) for _ in range(20000)]
  steps = np.array([d.per_step for d in draws])
  comms = np.array([d.communication for d in draws])
  assert steps.min() > 0 and comms.min() > 0
  assert steps.mean() == pytest.approx(0.48, rel=0.01)
  assert comms.std() == pytest.approx(0.8, rel=0.05)
  again = _model(jitter=0.1)
  assert [again.sample(0) for _ in range(20000)] == draws


def test_synthetic_profiles():
  profiles = synthetic_device_profiles(
    20000, np.random.default_rng(0), median_seconds_per_sample=0.02, median_bandwidth=1e6
  )
  assert np.median(profiles.seconds_per_sample) == pytest.approx(0.02, rel=0.03)
  assert np.median(profiles.bandwidth) == pytest.approx(1e6, rel=0.05)
  same = synthetic_device_profiles(
    20000, np.random.default_rng(0), median_seconds_per_sample=0.02, median_bandwidth=1e6
  )
  np.testing.assert_array_equal(profiles.bandwidth, same.bandwidth)
  model = FedScaleLatency(
    20000,
    np.random.default_rng(1),
    batch_size=8,
    seconds_per_sample=profiles.seconds_per_sample,
    bandwidth=profiles.bandwidth,
    model_bytes=1000,
  )
  assert model.expected_step_time(3) == pytest.approx(24 * profiles.seconds_per_sample[3])


@pytest.mark.parametrize(
  'kwargs,match',
  [
    ({'batch_size': 0}, 'latency.batch_size'),
    ({'model_bytes': -1}, 'latency.model_bytes'),
    ({'model_bytes': 1.5}, 'latency.model_bytes'),
    ({'bandwidth_scale': 0.0}, 'latency.kwargs.bandwidth_scale'),
    ({'jitter': -0.1}, 'latency.kwargs.jitter'),
    ({'seconds_per_sample': np.array([0.1, 0.0])}, 'latency.kwargs.seconds_per_sample'),
    ({'seconds_per_sample': np.array([0.1])}, 'latency.kwargs.seconds_per_sample'),
    ({'bandwidth': np.array([1e6, np.inf])}, 'latency.kwargs.bandwidth'),
    ({'upload_bandwidth': -1.0}, 'latency.kwargs.upload_bandwidth'),
  ],
)
def test_invalid_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    _model(**kwargs)


@pytest.mark.parametrize(
  'kwargs,match',
  [
    ({'median_seconds_per_sample': 0.0}, 'latency.kwargs.median_seconds_per_sample'),
    ({'median_bandwidth': -1.0}, 'latency.kwargs.median_bandwidth'),
    ({'compute_sigma': -0.1}, 'latency.kwargs.compute_sigma'),
    ({'bandwidth_sigma': float('nan')}, 'latency.kwargs.bandwidth_sigma'),
  ],
)
def test_invalid_profile_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    synthetic_device_profiles(4, np.random.default_rng(0), **kwargs)
