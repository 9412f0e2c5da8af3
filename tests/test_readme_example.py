"""The README's override example trains: choosing an algorithm applies its own defaults."""

import ast
import json
import os
import re
import shlex
import sys

import ml_collections
import pytest

from fedsim_jax import cli
from fedsim_jax.config import set_by_path
from fedsim_jax.experiment import run_experiment
from tests.goldens.cases import load_config_file
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_example() -> tuple[str, dict[str, str]]:
  """The config (a module name or a file) and `--config.` overrides of the README's first
  experiment command."""
  with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  section = text[text.index('## Configs and flags') :]
  command = re.search(r'```bash\n(.*?)```', section, re.S).group(1).replace('\\\n', ' ')
  args = shlex.split(command)
  config_file = next(a.split('=', 1)[1] for a in args if a.startswith('--config='))
  overrides = dict(a[len('--config.') :].split('=', 1) for a in args if a.startswith('--config.'))
  return config_file, overrides


def test_the_readme_override_example_trains_on_a_reduced_run(digits_data_dir, tmp_path):
  config_file, overrides = _readme_example()
  assert overrides['algorithm.name'] == 'fedyogi'
  assert not any('server_learning_rate' in path for path in overrides)  # defaults do it
  config = load_config_file(cli.config_module_file(config_file) or os.path.join(_REPO, config_file))
  for path, text in overrides.items():
    if path not in ('data.data_dir', 'run.num_rounds'):
      default = config
      for part in path.split('.'):
        default = default[part]
      set_by_path(config, path, type(default)(text))
  # Reduced: digits instead of Fashion-MNIST, 20 clients, 15 rounds.
  config.data.name, config.data.data_dir = 'digits', str(digits_data_dir)
  config.data.num_clients = 20
  config.algorithm.kwargs.cohort_size = 5
  config.run.num_rounds, config.run.eval_every = 15, 5
  summary = run_experiment(config, tmp_path)
  assert summary['final_accuracy'] > 0.6


def _readme_section(title: str) -> str:
  with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  start = text.index(f'\n### {title}\n')
  return text[start : text.index('\n#', start + 1)]


def _example(title: str) -> tuple[str, str, dict[str, str]]:
  """The module name, source and `--config.` overrides of README section `title`'s example."""
  section = _readme_section(title)
  source = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  command = re.search(r'```bash\n(.*?)```', section, re.S).group(1).replace('\\\n', ' ')
  args = shlex.split(command)
  overrides = dict(a[len('--config.') :].split('=', 1) for a in args if a.startswith('--config.'))
  module = next(value for path, value in overrides.items() if path.endswith('.module'))
  return module, source, overrides


@pytest.fixture(scope='module')
def readme_package(tmp_path_factory):
  """The README's model and latency model examples saved as the modules their commands name,
  importable."""
  root = tmp_path_factory.mktemp('readme')
  for title in ('New model', 'New latency model'):
    module, source, _ = _example(title)
    path = root.joinpath(*module.split('.')).with_suffix('.py')
    path.parent.mkdir(exist_ok=True)
    (path.parent / '__init__.py').write_text('')
    path.write_text(source)
  sys.path.insert(0, str(root))
  yield root
  sys.path.remove(str(root))


@pytest.mark.parametrize(
  'title, section', [('New model', 'model'), ('New latency model', 'latency')]
)
def test_the_readme_plugin_examples_run_as_their_commands_select_them(
  readme_package, digits_data_dir, tmp_path, title, section
):
  _, _, overrides = _example(title)
  config = make_tiny_config('fedavg', digits_data_dir, clients=5, slots=5)
  config[section].kwargs = ml_collections.ConfigDict()  # (the tiny MLP's are not its settings)
  kwargs = {}
  for path, text in overrides.items():
    if path.startswith(f'{section}.kwargs.'):
      kwargs[path.rsplit('.', 1)[1]] = ast.literal_eval(text)
    elif path.startswith(f'{section}.'):
      set_by_path(config, path, text)
  assert kwargs and config[section].module and config[section].name
  config[section].kwargs.update(kwargs)
  config.client.local_steps, config.run.num_rounds, config.run.eval_every = 10, 6, 6
  run_experiment(config, tmp_path)
  with open(tmp_path / 'config.json') as f:
    resolved = json.load(f)[section]
  assert resolved['name'] == config[section].name
  assert {k: resolved['kwargs'][k] for k in kwargs} == kwargs
  with open(tmp_path / 'metrics.jsonl') as f:
    first, last = (json.loads(line)['test_accuracy'] for line in f)
  assert last > first + 0.2  # it trains
