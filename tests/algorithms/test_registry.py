"""The algorithm registry: every algorithm's settings are documented, checked and buildable."""

import dataclasses

import numpy as np
import pytest

from fedsim_jax import algorithms
from fedsim_jax.runtime.latency import PerStepLatency
from fedsim_jax.settings import ConfigError

ALGORITHMS = algorithms.names()


def test_the_papers_algorithms_and_their_baselines_are_registered():
  assert len(ALGORITHMS) == 37
  for name in (
    'fedavg',
    'fedbuff',
    'fedcompass_n',
    'ccfedavg_c',
    'fare_dust',
    'feast_msg',
    'fedasmu_h3',
    'moon',
    'feddyn',
    'port',
    'asofed',
    'fedsa',
    'fednova_budget',
    'scaffold',
    'qffedavg',
    'fednova',
    'ditto',
    'fedbn',
  ):
    assert name in ALGORITHMS


@pytest.mark.parametrize('name', ALGORITHMS)
def test_every_setting_has_a_check_and_a_description(name):
  for field in dataclasses.fields(algorithms.get_spec(name).settings):
    assert callable(field.metadata.get('check')), field.name
    assert field.metadata.get('doc'), field.name


def _run_facts(name):
  if name.startswith('fedcompass'):
    return algorithms.RunFacts(num_clients=8, num_rounds=4)
  if name.startswith('fedasmu'):
    return algorithms.RunFacts(num_clients=8, num_rounds=4, local_epochs=2.0)
  if name == 'fedbn':  # needs a BatchNorm model
    return algorithms.RunFacts(num_clients=8, num_rounds=4, local_steps=2, model_norm='batch')
  return algorithms.RunFacts(num_clients=8, num_rounds=4, local_steps=2)


def _kwargs(name):
  fields = algorithms.get_spec(name).settings.field_names()
  kwargs = {key: 3 for key in ('cohort_size', 'concurrency') if key in fields}
  if name.startswith('fedasmu'):
    kwargs['trigger_period'] = 5.0
  return kwargs


@pytest.mark.parametrize('name', ALGORITHMS)
def test_every_algorithm_builds_from_its_checked_settings(name):
  settings = algorithms.resolve_settings(name, _kwargs(name), _run_facts(name))
  sizes = np.array([10, 20, 30, 40, 10, 20, 30, 40])
  latency = PerStepLatency(8, np.random.default_rng(0), mean=1.0)
  context = algorithms.BuildContext(name, _run_facts(name), sizes, latency)
  algorithm = algorithms.build(settings, context)
  assert callable(algorithm.aggregator.init) and callable(algorithm.aggregator.apply)
  assert callable(algorithm.make_client_update)
  assert hasattr(algorithm.scheduler, 'start') and hasattr(algorithm.scheduler, 'on_arrival')


def test_unknown_names_and_modules_are_one_line_errors():
  with pytest.raises(
    ConfigError, match=r"^algorithm.name='fedbuf' is not known \(did you mean 'fedbuff'\?\)"
  ):
    algorithms.get_spec('fedbuf')
  with pytest.raises(ConfigError, match=r"^algorithm.module='no_such_module_x' cannot be imported"):
    algorithms.import_module('no_such_module_x')


def test_a_name_cannot_be_registered_twice_by_different_factories():
  spec = algorithms.get_spec('fedavg')
  with pytest.raises(ValueError, match='already registered'):
    algorithms.register('fedavg', spec.settings)(lambda settings, context: None)


@pytest.mark.parametrize('name', ALGORITHMS)
def test_every_numeric_setting_refuses_nan_and_inf_in_one_line(name):
  settings = algorithms.get_spec(name).settings
  numeric = [
    field
    for field in dataclasses.fields(settings)
    if isinstance(field.default, float) and not isinstance(field.default, bool)
  ]
  for field in numeric:
    for bad in (float('nan'), float('inf')):
      with pytest.raises(ConfigError) as error:
        algorithms.resolve_settings(name, {**_kwargs(name), field.name: bad}, _run_facts(name))
      message = str(error.value)
      assert '\n' not in message and f'algorithm.kwargs.{field.name}=' in message, message


def test_asofed_delay_unit_must_be_a_positive_number():
  for bad in (0.0, -1.0, 'seconds', True):
    with pytest.raises(
      ConfigError, match=r'^algorithm.kwargs.delay_unit=.* allowed values: a number > 0'
    ):
      algorithms.resolve_settings(
        'asofed', {**_kwargs('asofed'), 'delay_unit': bad}, _run_facts('asofed')
      )
  settings = algorithms.resolve_settings(
    'asofed', {**_kwargs('asofed'), 'delay_unit': 0.1}, _run_facts('asofed')
  )
  assert settings.delay_unit == 0.1


# Rounds of these are summed chunk by chunk beyond executor.max_batch_tasks (docs/design-notes.md,
# "Memory that does not grow with the cohort"); the others stack every update of a round.
LINEAR_FORM = {
  'ccfedavg',
  'ccfedavg_c',
  'ccfedavg_strategy1',
  'ccfedavg_strategy2',
  'ditto',
  'fare_dust',
  'fedadagrad',
  'fedadam',
  'fedavg',
  'fedavg_dropout',
  'fedavgm',
  'fedbn',
  'fedbuff',
  'fednova',
  'fednova_budget',
  'fedprox',
  'fedyogi',
  'moon',
  'qffedavg',
  'scaffold',
}


@pytest.mark.parametrize('name', ALGORITHMS)
def test_the_aggregators_with_a_linear_form_are_the_documented_ones(name):
  settings = algorithms.resolve_settings(name, _kwargs(name), _run_facts(name))
  latency = PerStepLatency(8, np.random.default_rng(0), mean=1.0)
  context = algorithms.BuildContext(name, _run_facts(name), np.full(8, 10), latency)
  aggregator = algorithms.build(settings, context).aggregator
  assert (aggregator.linear is not None) == (name in LINEAR_FORM)
