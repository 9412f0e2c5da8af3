"""The model registry: every model is selected by name with its settings dataclass, whose
declarations are the one place its fields are checked (one line naming `model.kwargs.<field>`)."""

import dataclasses

import pytest

from fedsim_jax.models import MODELS, ModelContext, build_model, get_model
from fedsim_jax.settings import ConfigError

CASES = [(entry.name, f.name) for entry in MODELS for f in dataclasses.fields(entry.settings)]


@pytest.mark.parametrize('name', MODELS.names())
def test_an_unknown_setting_of_every_model_is_one_line_naming_the_closest(name):
  with pytest.raises(ConfigError) as error:
    MODELS.resolve(name, {'hidden_size': (8,)})
  message = str(error.value)
  assert '\n' not in message
  assert message.startswith('model.kwargs.hidden_size is not a setting of ')
  assert 'allowed: [' in message


@pytest.mark.parametrize('name, field', CASES)
def test_a_bad_value_of_every_model_setting_is_one_line_naming_it(name, field):
  with pytest.raises(ConfigError) as error:
    MODELS.resolve(name, {field: object()})
  message = str(error.value)
  assert '\n' not in message
  assert message.startswith(f'model.kwargs.{field}=<object object') and 'allowed values' in message


@pytest.mark.parametrize(
  'name, kwargs, expected',
  [
    ('mlp', {'hidden_sizes': (0,)}, 'model.kwargs.hidden_sizes=(0,) is invalid'),
    ('mlp', {'hidden_sizes': 16}, 'model.kwargs.hidden_sizes=16 is invalid'),
    ('resnet18', {'norm': 'layer'}, "model.kwargs.norm='layer' is not allowed"),
    ('resnet20', {'groups': 0}, 'model.kwargs.groups=0 is invalid'),
    ('vgg11', {'norm': None}, 'model.kwargs.norm=None is not allowed'),
    ('char_lstm', {'pad_id': -1}, 'model.kwargs.pad_id=-1 is invalid'),
    ('text_cnn', {'vocab_size': 2.5}, 'model.kwargs.vocab_size=2.5 is invalid'),
    ('mlp', {'dropout': 0.5}, 'model.kwargs.dropout is not a setting of MLPSettings'),
    ('mlp', {'norm': 'layer'}, "model.kwargs.norm='layer' is not allowed"),
  ],
)
def test_invalid_model_settings(name, kwargs, expected):
  with pytest.raises(ConfigError, match='^' + expected.replace('(', r'\(').replace(')', r'\)')):
    MODELS.resolve(name, kwargs)


def test_an_unknown_model_names_the_registered_ones():
  with pytest.raises(ConfigError, match=r"^model.name='mlpp' is not known \(did you mean 'mlp'"):
    get_model('mlpp', (8, 8, 1), 10)


def test_settings_reach_the_architecture_and_the_bundle():
  context = ModelContext('resnet18', (8, 8, 3), 10)
  group = build_model(MODELS.resolve('resnet18', {'norm': 'group', 'width': 4}), context)
  assert group.name == 'resnet18' and group.module.norm == 'group' and not group.has_state
  assert group.module.widths == (4, 8, 16, 32)
  batch = build_model(MODELS.resolve('resnet18', {'width': 4}), context)
  assert batch.state_collections == ('batch_stats',)  # BatchNorm by default
  mlp = get_model('mlp', (8, 8, 1), 10, hidden_sizes=[16, 8])  # a list, as config.json holds it
  assert mlp.module.hidden_sizes == (16, 8)
  tokens = get_model('char_lstm', (80,), 90, pad_id=None)
  assert tokens.pad_id is None and tokens.input_dtype.__name__ == 'int32'


def test_a_text_cnn_on_too_short_sequences_is_refused():
  with pytest.raises(ConfigError, match="model.name='text_cnn' is invalid for inputs of length 4"):
    get_model('text_cnn', (4,), 2)
