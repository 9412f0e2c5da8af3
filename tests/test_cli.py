"""The binaries' shared flag pieces: comma lists and one-line flag errors."""

import pytest

from fedsim_jax import cli


def test_parse_list_converts_checks_and_drops_duplicates():
  assert cli.parse_list('seeds', '2, 0,2,,1', int, lambda v: v >= 0, 'integers >= 0') == [2, 0, 1]
  assert cli.parse_list('seeds', '', int, lambda v: v >= 0, 'integers >= 0') == []
  assert cli.parse_list('cases', 'b,a', str, lambda v: v in 'ab', 'a,b') == ['b', 'a']


@pytest.mark.parametrize(('text', 'item'), [('1,x', 'x'), ('-1', '-1')])
def test_parse_list_names_the_flag_the_item_and_the_allowed_values(text, item):
  with pytest.raises(cli.FlagError) as info:
    cli.parse_list('seeds', text, int, lambda v: v >= 0, 'integers >= 0')
  assert str(info.value) == f'--seeds={text!r}: {item!r} is invalid; allowed values: integers >= 0'
  assert isinstance(info.value, ValueError)
