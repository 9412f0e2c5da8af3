"""Typed settings: each check's allowed values, one-line errors, closest-name hints."""

import dataclasses
import math

import pytest

from fedsim_jax.settings import (
  ConfigError,
  Settings,
  boolean,
  closest,
  decay,
  number,
  one_of,
  positive,
  setting,
  text,
)


@pytest.mark.parametrize(
  'check,good,bad',
  [
    (positive(), [1e-9, 3, 2.5], [0, -1, math.nan, math.inf, True, '1', None]),
    (positive(allow_zero=True), [0, 0.0, 4], [-1e-9, math.nan, -math.inf]),
    (positive(integer=True), [1, 7], [0, 1.0, 2.5, True]),
    (positive(integer=True, optional=True), [None, 2], [0, 'x']),
    (decay(), [0, 0.5, 0.999], [1, 1.0, -0.1, math.nan]),
    (number(above=0, maximum=1), [1, 0.3], [0, 1.01]),
    (number(minimum=1), [1, 2.0], [0.999, math.inf]),
    (one_of(('a', 'b')), ['a', 'b'], ['c', None, 1]),
    (one_of(('a',), optional=True), ['a', None], ['b']),
    (boolean, [True, False], [0, 1, 'True', None]),
    (text(optional=True), ['x', None], ['', 3]),
  ],
)
def test_checks_accept_their_allowed_values_only(check, good, bad):
  for value in good:
    check('algorithm.kwargs.x', value)
  for value in bad:
    with pytest.raises(ConfigError) as error:
      check('algorithm.kwargs.x', value)
    message = str(error.value)
    assert message.startswith('algorithm.kwargs.x=') and 'allowed' in message
    assert '\n' not in message


def test_number_states_its_bounds():
  with pytest.raises(ConfigError, match=r'allowed values: a number > 0 and <= 1$'):
    number(above=0, maximum=1)('rate', 2)
  with pytest.raises(ConfigError, match=r'allowed values: an integer >= 2 or None$'):
    number(integer=True, minimum=2, optional=True)('steps', 1)


def test_closest_names_the_nearest_field_or_nothing():
  assert closest('bufer_size', ['buffer_size', 'concurrency']) == " (did you mean 'buffer_size'?)"
  assert closest('zzz', ['buffer_size']) == ''


@dataclasses.dataclass(frozen=True)
class _Example(Settings):
  low: int = setting(1, positive(integer=True), 'lower bound')
  high: int = setting(5, positive(integer=True), 'upper bound')

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.low > self.high:
      raise ConfigError(f'{prefix}low={self.low} is invalid; allowed values: 1..{self.high}')


def test_from_kwargs_takes_defaults_and_validates_fields_then_rules():
  assert _Example.from_kwargs({}) == _Example(1, 5)
  assert _Example.from_kwargs({'high': 9}, 'p.').high == 9
  with pytest.raises(
    ConfigError, match=r"^p\.hgih is not a setting of _Example \(did you mean 'high'\?\)"
  ):
    _Example.from_kwargs({'hgih': 3}, 'p.')
  with pytest.raises(ConfigError, match=r'^p\.low=0 is invalid'):
    _Example.from_kwargs({'low': 0}, 'p.')
  with pytest.raises(ConfigError, match=r'^p\.low=7 is invalid; allowed values: 1\.\.5'):
    _Example.from_kwargs({'low': 7}, 'p.')


def test_lists_become_tuples_and_settings_are_frozen():
  @dataclasses.dataclass(frozen=True)
  class WithTuple(Settings):
    names: tuple = setting(('a',), lambda name, value: None)

  settings = WithTuple.from_kwargs({'names': ['a', 'b']})
  assert settings.names == ('a', 'b')
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.names = ()  # type: ignore[misc]
  assert settings.replace(names=('c',)).names == ('c',)
  assert settings.as_dict() == {'names': ('a', 'b')}
