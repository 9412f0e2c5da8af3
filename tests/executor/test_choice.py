"""The default backend / step-loop rule (`fedsim_jax.executor.choice`)."""

import jax
import pytest

from fedsim_jax import config as config_lib
from fedsim_jax.executor.choice import (
  Backend,
  StepLoop,
  cpu_cores,
  model_has_convolution,
  resolve_execution,
  resolve_threads,
)
from fedsim_jax.models import get_model


@pytest.mark.parametrize(
  'name,expected', [('mlp', False), ('mnist_cnn', True), ('lenet5', True), ('char_lstm', False)]
)
def test_convolution_detection(name, expected):
  shape, classes = ((80,), 90) if name == 'char_lstm' else ((28, 28, 1), 10)
  model = get_model(name, shape, classes)
  assert model_has_convolution(model, model.init(jax.random.PRNGKey(0))) is expected


@pytest.mark.parametrize(
  'platform,devices,conv,expected',
  [
    ('cpu', 1, False, ('loop', 'scan')),
    ('cpu', 1, True, ('loop', 'host')),
    ('cpu', 4, True, ('vmap', 'scan')),  # sharding needs vmap
    ('gpu', 1, True, ('vmap', 'scan')),
    ('tpu', 1, False, ('vmap', 'scan')),
  ],
)
def test_auto_rule(platform, devices, conv, expected):
  assert (
    resolve_execution(
      'auto', 'auto', platform=platform, devices=devices, convolutional=lambda: conv
    )
    == expected
  )


def test_explicit_settings_are_kept():
  asked = []

  def convolutional():
    asked.append(True)
    return True

  assert resolve_execution('vmap', 'auto', platform='cpu', convolutional=convolutional) == (
    'vmap',
    'scan',
  )
  assert resolve_execution('loop', 'scan', platform='cpu', convolutional=convolutional) == (
    'loop',
    'scan',
  )
  assert resolve_execution('auto', 'host', platform='gpu') == ('loop', 'host')
  assert not asked  # the model is only inspected when the answer depends on it
  assert resolve_execution('loop', 'auto', platform='cpu', convolutional=convolutional) == (
    'loop',
    'host',
  )


def test_unknown_setting_is_one_line_error():
  with pytest.raises(ValueError, match=r"executor.backend='pmap'.*allowed"):
    resolve_execution('pmap', 'auto')
  config = config_lib.base_config()
  config.executor.backend = 'pmap'
  with pytest.raises(config_lib.ConfigError, match='executor.backend'):
    config_lib.validate(config)
  config.executor.backend = 'vmap'
  config.executor.step_loop = 'host'
  with pytest.raises(config_lib.ConfigError, match='step_loop'):
    config_lib.validate(config)
  config.executor.step_loop = 'scan'
  for threads in (2, -1):  # threads run loop-backend tasks; vmap runs one program
    config.executor.threads = threads
    with pytest.raises(config_lib.ConfigError, match=r'executor.threads.*allowed'):
      config_lib.validate(config)


def test_threads_rule():
  assert resolve_threads(0, 'loop', platform='cpu') == cpu_cores()
  assert resolve_threads(0, 'vmap', platform='cpu') == 1
  assert resolve_threads(0, 'loop', platform='gpu') == 1
  assert resolve_threads(3, 'loop', platform='gpu') == 3  # explicit settings are kept
  with pytest.raises(ValueError, match='executor.threads'):
    resolve_threads(-1, 'loop')


def test_settings_are_parsed_into_enums_equal_to_their_names():
  backend, step_loop = resolve_execution('auto', 'auto', platform='cpu')
  assert (backend, step_loop) == (Backend.LOOP, StepLoop.SCAN) == ('loop', 'scan')
  assert type(backend) is Backend and type(step_loop) is StepLoop
  explicit = resolve_execution('vmap', 'scan', platform='cpu')
  assert type(explicit[0]) is Backend and type(explicit[1]) is StepLoop


def test_an_invalid_backend_for_threads_is_named():
  with pytest.raises(ValueError, match=r"executor.backend='pmap'; allowed: \('vmap', 'loop'\)"):
    resolve_threads(0, 'pmap')
