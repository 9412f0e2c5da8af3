"""FedASMU device-ratio latency: slowest / fastest step time == ratio, uniform in between."""

import numpy as np
import pytest

from fedsim_jax.runtime.latency.device_ratio import DeviceRatioLatency


@pytest.mark.parametrize('num_clients,ratio', [(2, 5.0), (100, 5.0), (200, 440.0), (50, 1.0)])
def test_ratio_exactly_met_and_bounds(num_clients, ratio):
  model = DeviceRatioLatency(
    num_clients, np.random.default_rng(0), fastest_step_time=0.2, ratio=ratio
  )
  times = np.array([model.expected_step_time(i) for i in range(num_clients)])
  assert times.min() == 0.2
  assert times.max() / times.min() == pytest.approx(ratio, rel=1e-12)
  assert times[0] == 0.2 and times[1] == pytest.approx(0.2 * ratio)
  assert np.all((times >= 0.2) & (times <= 0.2 * ratio))


def test_uniform_in_between_and_seeded():
  model = DeviceRatioLatency(20000, np.random.default_rng(0), fastest_step_time=1.0)
  assert model.step_time[2:].mean() == pytest.approx(3.0, rel=0.01)
  again = DeviceRatioLatency(20000, np.random.default_rng(0), fastest_step_time=1.0)
  np.testing.assert_array_equal(model.step_time, again.step_time)


def test_single_client_is_fastest():
  model = DeviceRatioLatency(1, np.random.default_rng(0), fastest_step_time=0.5)
  assert model.sample(0) == (0.0, 0.0, 0.5)


def test_communication_fixed_and_bandwidth_based():
  fixed = DeviceRatioLatency(
    3, np.random.default_rng(0), fastest_step_time=1.0, communication_time=4.0, bandwidth_scale=0.5
  )
  assert fixed.sample(2).communication == 8.0
  assert fixed.extra_download_time(2) == 4.0
  bw = DeviceRatioLatency(
    3,
    np.random.default_rng(0),
    fastest_step_time=1.0,
    model_bytes=1000,
    bandwidth=np.array([100.0, 200.0, 500.0]),
    bandwidth_scale=1 / 50,
  )
  assert bw.sample(0).communication == pytest.approx(2 * 1000 / 2.0)
  assert bw.extra_download_time(2) == pytest.approx(1000 / 10.0)
  assert bw.sample(1).duration(3) == pytest.approx(2 * 1000 / 4.0 + 3 * 5.0)


def test_jitter():
  model = DeviceRatioLatency(2, np.random.default_rng(0), fastest_step_time=1.0, jitter=0.05)
  steps = np.array([model.sample(1).per_step for _ in range(20000)])
  assert steps.mean() == pytest.approx(5.0, rel=0.01)
  assert steps.std() == pytest.approx(0.25, rel=0.05)


@pytest.mark.parametrize(
  'kwargs,match',
  [
    ({'fastest_step_time': 0.0}, 'latency.kwargs.fastest_step_time'),
    ({'ratio': 0.5}, 'latency.kwargs.ratio'),
    ({'ratio': float('inf')}, 'latency.kwargs.ratio'),
    ({'communication_time': -1.0}, 'latency.kwargs.communication_time'),
    (
      {'communication_time': 1.0, 'bandwidth': 10.0, 'model_bytes': 5},
      'latency.kwargs.communication_time',
    ),
    ({'bandwidth': 10.0}, 'latency.kwargs.bandwidth'),
    ({'bandwidth': 0.0, 'model_bytes': 5}, 'latency.kwargs.bandwidth'),
    ({'bandwidth': 10.0, 'model_bytes': -5}, 'latency.kwargs.model_bytes'),
    ({'bandwidth_scale': -1.0}, 'latency.kwargs.bandwidth_scale'),
    ({'jitter': -1.0}, 'latency.kwargs.jitter'),
  ],
)
def test_invalid_settings(kwargs, match):
  settings = {'fastest_step_time': 1.0, **kwargs}
  with pytest.raises(ValueError, match=match):
    DeviceRatioLatency(3, np.random.default_rng(0), **settings)
