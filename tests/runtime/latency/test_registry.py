"""Latency/availability registries: each name builds its model from its settings dataclass."""

import math
import pathlib

import numpy as np
import pytest

from fedsim_jax.runtime.latency import (
  AVAILABILITY_MODELS,
  LATENCY_MODELS,
  AlwaysAvailable,
  DeviceRatioLatency,
  FedScaleLatency,
  LogNormalLatency,
  PeriodicAvailability,
  PerStepLatency,
  TraceAvailability,
  TraceLatency,
  make_availability,
  make_latency,
)

EXAMPLE = pathlib.Path(__file__).parents[3] / 'configs' / 'traces' / 'example_trace.json'
SIZES = np.array([5, 100, 40])
SETTINGS = {
  'per_step': ({'mean': 0.5}, PerStepLatency),
  'lognormal': ({'model': 'per_domain_per_example'}, LogNormalLatency),
  'fedscale': ({}, FedScaleLatency),
  'device_ratio': ({'fastest_step_time': 0.1}, DeviceRatioLatency),
  'trace': ({'trace': str(EXAMPLE)}, TraceLatency),
}


def _make(name, **settings):
  return make_latency(
    name,
    num_clients=3,
    rng=np.random.default_rng(0),
    client_sizes=SIZES,
    batch_size=32,
    model_bytes=10_000,
    straggler_mask=np.array([False, True, False]),
    **settings,
  )


@pytest.mark.parametrize('name', LATENCY_MODELS.names())
def test_every_latency_model_builds(name):
  settings, cls = SETTINGS[name]
  model = _make(name, **settings)
  assert isinstance(model, cls)
  task = model.sample(1)
  assert task.duration(3) > 0 and model.expected_step_time(1) > 0


def test_lognormal_examples_per_step_from_sizes():
  model = _make('lognormal')
  np.testing.assert_array_equal(model.examples_per_step, [5, 32, 32])
  assert model.group(1) == 'straggler'


def test_fedscale_explicit_and_synthetic_profiles():
  explicit = _make('fedscale', seconds_per_sample=0.01, bandwidth=1e4)
  assert explicit.sample(0) == (2.0, 0.0, pytest.approx(0.96))
  synthetic = _make('fedscale', median_bandwidth=1e4, bandwidth_sigma=0.0)
  assert synthetic.sample(2).communication == pytest.approx(2.0)
  with pytest.raises(ValueError, match='latency.kwargs.median_bandwidth=.*invalid with explicit'):
    _make('fedscale', bandwidth=1e4, seconds_per_sample=0.1, median_bandwidth=1e4)


def test_device_ratio_bandwidth_uses_model_bytes():
  model = _make('device_ratio', fastest_step_time=0.1, bandwidth=1e3)
  assert model.sample(0).communication == pytest.approx(20.0)


@pytest.mark.parametrize(
  'name,setting',
  [
    ('per_step', 'speed'),
    ('lognormal', 'examples_per_step'),
    ('fedscale', 'jiter'),
    ('device_ratio', 'ratios'),
    ('trace', 'path'),
  ],
)
def test_unknown_setting_rejected(name, setting):
  settings = dict(SETTINGS[name][0], **{setting: 1})
  with pytest.raises(ValueError, match=f'latency.kwargs.{setting} is not a setting.*allowed'):
    _make(name, **settings)


def test_unknown_names_rejected():
  with pytest.raises(ValueError, match='latency.name=.*allowed'):
    _make('pareto')
  with pytest.raises(ValueError, match='availability.name=.*allowed'):
    make_availability('diurnal', num_clients=3, rng=np.random.default_rng(0))


def test_availability_models():
  rng = np.random.default_rng(0)
  assert AVAILABILITY_MODELS.names() == ['always', 'periodic', 'trace']
  assert isinstance(make_availability('always', num_clients=3, rng=rng), AlwaysAvailable)
  periodic = make_availability('periodic', num_clients=3, rng=rng, online_fraction=0.5, period=10.0)
  assert isinstance(periodic, PeriodicAvailability)
  trace = make_availability('trace', num_clients=3, rng=rng, trace=EXAMPLE)
  assert isinstance(trace, TraceAvailability) and trace.next_available(0, 3600.0) == 7200.0
  assert trace.online_until(1, 0.0) == math.inf
  with pytest.raises(ValueError, match='availability.kwargs.period is not a setting.*allowed'):
    make_availability('always', num_clients=3, rng=rng, period=1.0)
  with pytest.raises(ValueError, match='availability.kwargs.phase is not a setting.*allowed'):
    make_availability(
      'periodic', num_clients=3, rng=rng, online_fraction=0.5, period=1.0, phase=0.0
    )
