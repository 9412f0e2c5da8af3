"""The sweep specification: values, distributions, grid and random points, folder names, files."""

import pytest

from fedsim_jax.sweep.spec import (
  Distribution,
  Search,
  SweepError,
  SweepSpec,
  parse_values,
  point_names,
  read_file,
  split_top_level,
)


def test_values_are_literals_split_at_top_level_commas():
  assert split_top_level("0.1,(1,2),'a,b',[3, 4]") == ['0.1', '(1,2)', "'a,b'", '[3, 4]']
  assert parse_values('x', '0.01,0.1,1') == (0.01, 0.1, 1)
  assert parse_values('x', 'sgd,adam') == ('sgd', 'adam')  # bare words are strings
  assert parse_values('x', '(0,1),(2,3),None') == ((0, 1), (2, 3), None)


def test_distributions_parse_and_check_their_bounds():
  assert parse_values('x', 'log_uniform(1e-3,1e-1)') == Distribution('log_uniform', 1e-3, 0.1)
  assert parse_values('x', 'int_uniform(1, 5)') == Distribution('int_uniform', 1, 5)
  for bad, allowed in [
    ('log_uniform(0,1)', '0 < low < high'),
    ('uniform(2,1)', 'low < high'),
    ('uniform(1)', 'two numbers'),
    ('int_uniform(0.5,3)', 'integer bounds'),
    ('uniform(1,1e999)', 'finite'),
  ]:
    with pytest.raises(SweepError, match='--sweep.x') as error:
      parse_values('x', bad)
    assert allowed in str(error.value)


def test_grid_points_are_every_combination_in_row_major_order():
  spec = SweepSpec(
    {'client.learning_rate': (0.01, 0.1), 'algorithm.kwargs.buffer_size': (5, 10)}, seeds=(0, 1)
  )
  points = spec.points()
  assert [p.settings for p in points] == [
    (('client.learning_rate', 0.01), ('algorithm.kwargs.buffer_size', 5)),
    (('client.learning_rate', 0.01), ('algorithm.kwargs.buffer_size', 10)),
    (('client.learning_rate', 0.1), ('algorithm.kwargs.buffer_size', 5)),
    (('client.learning_rate', 0.1), ('algorithm.kwargs.buffer_size', 10)),
  ]
  assert points[1].name == 'learning_rate=0.01,buffer_size=10'


def test_random_search_is_seeded_distinct_and_keeps_its_earlier_points():
  parameters = {
    'client.learning_rate': Distribution('log_uniform', 1e-3, 1e-1),
    'algorithm.kwargs.buffer_size': (5, 10),
    'client.local_steps': Distribution('int_uniform', 1, 3),
  }
  five = SweepSpec(parameters, (0,), Search.RANDOM, num_points=5, search_seed=7).points()
  eight = SweepSpec(parameters, (0,), Search.RANDOM, num_points=8, search_seed=7).points()
  other = SweepSpec(parameters, (0,), Search.RANDOM, num_points=5, search_seed=8).points()
  assert eight[:5] == five
  assert other != five
  assert len({p.settings for p in eight}) == 8
  for point in eight:
    values = dict(point.settings)
    assert 1e-3 <= values['client.learning_rate'] <= 1e-1
    assert values['client.learning_rate'] == float(f'{values["client.learning_rate"]:.6g}')
    assert values['algorithm.kwargs.buffer_size'] in (5, 10)
    assert values['client.local_steps'] in (1, 2, 3)


def test_random_search_over_lists_draws_distinct_grid_points():
  parameters = {'a.x': (1, 2), 'a.y': (3, 4)}
  drawn = SweepSpec(parameters, (0,), Search.RANDOM, num_points=4).points()
  grid = SweepSpec(parameters, (0,)).points()
  assert sorted(p.settings for p in drawn) == sorted(p.settings for p in grid)


def test_point_names_use_the_shortest_unique_suffix_and_stay_apart():
  paths = ['client.learning_rate', 'server.learning_rate', 'run.eval_every']
  assert point_names(paths, [(0.1, 1.0, 5)]) == [
    'client.learning_rate=0.1,server.learning_rate=1.0,eval_every=5'
  ]
  # Values that print alike ('a b' and 'a_b') get a hash of their exact settings.
  names = point_names(['x.s'], [('a b',), ('a_b',)])
  assert names[0] != names[1] and all(n.startswith('s=a_b-') for n in names)
  assert len(point_names(['x.s'], [('v' * 300,)])[0]) <= 120


@pytest.mark.parametrize(
  'spec, message',
  [
    (dict(parameters={}, seeds=(0,)), 'varies no setting'),
    (dict(parameters={'a.x': ()}, seeds=(0,)), 'lists no value'),
    (dict(parameters={'a.x': (1, 1)}, seeds=(0,)), 'lists a value twice'),
    (dict(parameters={'seed': (1, 2)}, seeds=(0,)), 'use --seeds'),
    (dict(parameters={'a.x': (1,)}, seeds=()), 'seeds=[]'),
    (dict(parameters={'a.x': (1,)}, seeds=(0, 0)), 'distinct integers'),
    (dict(parameters={'a.x': (1,)}, seeds=(0,), fixed={'a.x': 2}), 'both swept and set'),
    (
      dict(parameters={'a.x': Distribution('uniform', 0, 1)}, seeds=(0,)),
      'needs --search=random',
    ),
    (dict(parameters={'a.x': (1,)}, seeds=(0,), num_points=3), 'random only'),
    (dict(parameters={'a.x': (1,)}, seeds=(0,), search=Search.RANDOM), '--num_points=None'),
    (
      dict(parameters={'a.x': (1, 2)}, seeds=(0,), search=Search.RANDOM, num_points=3),
      'exceeds the 2 distinct points',
    ),
  ],
)
def test_invalid_specs_are_one_line_naming_what_is_allowed(spec, message):
  with pytest.raises(SweepError) as error:
    SweepSpec(**spec)
  assert message in str(error.value)
  assert 'allowed' in str(error.value)
  assert '\n' not in str(error.value)


def test_sweep_files_are_toml_with_lists_and_distribution_tables(tmp_path):
  path = tmp_path / 'sweep.toml'
  path.write_text(
    'config = "fedsim_jax.configs.fedbuff_fashion_mnist"\nseeds = [0, 1]\nsearch = "random"\n'
    'num_points = 3\n[set]\n"run.num_rounds" = 5\n[sweep]\n'
    '"client.learning_rate" = {log_uniform = [0.001, 0.1]}\n"data.straggler_classes" = [[0, 1]]\n'
  )
  content = read_file(str(path))
  assert content['sweep'] == {
    'client.learning_rate': Distribution('log_uniform', 0.001, 0.1),
    'data.straggler_classes': ((0, 1),),
  }
  assert content['set'] == {'run.num_rounds': 5} and content['seeds'] == [0, 1]
  for text, message in [
    ('seeds = [0\n', 'is not valid TOML'),
    ('speed = 1\n', "unknown key 'speed'"),
    ('[sweep]\n"a.x" = 3\n', 'a list of values or a distribution'),
    ('[sweep]\n"a.x" = {normal = [0, 1]}\n', 'is not a distribution'),
  ]:
    path.write_text(text)
    with pytest.raises(SweepError, match=message):
      read_file(str(path))
  with pytest.raises(SweepError, match='cannot be read'):
    read_file(str(tmp_path / 'missing.toml'))
