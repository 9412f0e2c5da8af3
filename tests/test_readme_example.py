"""The README's override example trains: choosing an algorithm applies its own defaults."""

import os
import re
import shlex

from fedsim_jax import cli
from fedsim_jax.config import set_by_path
from fedsim_jax.experiment import run_experiment
from tests.goldens.cases import load_config_file

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
