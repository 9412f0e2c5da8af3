"""The binaries' shared flag pieces: comma lists, one-line flag errors, config module names."""

import os

import pytest
from absl import flags
from ml_collections import config_flags

from fedsim_jax import cli

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGED = os.path.join(_REPO, 'fedsim_jax', 'configs')


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


def test_a_config_module_name_is_read_from_its_file():
  demo = os.path.join(_PACKAGED, 'fedavg_fashion_mnist.py')
  assert cli.config_module_file('fedsim_jax.configs.fedavg_fashion_mnist') == demo
  fedasmu = os.path.join(_PACKAGED, 'fedasmu_fashion_mnist.py')
  assert cli.config_module_file('fedsim_jax.configs.fedasmu_fashion_mnist:appendix') == (
    f'{fedasmu}:appendix'
  )


@pytest.mark.parametrize(
  'value',
  [
    'configs/fedavg_fashion_mnist.py',  # a path
    'fedavg_fashion_mnist.py',  # a file name, even a missing one
    'fedsim_jax.configs.no_such_config',
    'no_such_package.config',
    'fedsim_jax.configs.fedavg_fashion_mnist.get_config',  # a module is no package
    'os-path',
    'sys',  # built in: no file
  ],
)
def test_paths_and_unknown_names_are_no_config_modules(value):
  assert cli.config_module_file(value) is None


def test_the_flag_parser_loads_a_config_module_by_name():
  values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, 'config', flag_values=values)
  original = flags.FLAGS
  flags.FLAGS = values
  try:
    cli.parse_flags(['prog', '--config=fedsim_jax.configs.fedbuff_fashion_mnist'])
  finally:
    flags.FLAGS = original
  assert values['config'].value.algorithm.name == 'fedbuff'
  assert values['config'].config_filename == os.path.join(_PACKAGED, 'fedbuff_fashion_mnist.py')


@pytest.mark.parametrize(
  'module, expected',
  [
    ('fedsim_jax.run', ('--config', '--workdir', '--resume', '--describe')),
    ('fedsim_jax.data.prepare', ('--dataset', '--data_dir')),
    ('fedsim_jax.sweep.command', ('--config', '--workdir', '--seeds', '--processes', '--status')),
  ],
)
def test_help_lists_the_tools_own_flags(module, expected):
  import subprocess
  import sys

  result = subprocess.run(
    [sys.executable, '-m', module, '--help'], capture_output=True, text=True, timeout=120
  )
  assert result.returncode == 1, result.stderr[-2000:]  # absl's --help exits with 1
  for flag in expected:  # booleans show as --[no]<name>
    name = flag.removeprefix('--')
    assert f'  --{name}:' in result.stdout or f'  --[no]{name}:' in result.stdout, flag
