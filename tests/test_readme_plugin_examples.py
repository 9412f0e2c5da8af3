"""The README's plugin examples ("New partitioner", "New dataset", "New model", "New latency
model"), as printed, run: each module is saved where its text says, and its command's overrides
select it (on a reduced run)."""

import ast
import importlib
import json
import os
import re
import shlex
import sys

import numpy as np
import pytest

from fedsim_jax import cli
from fedsim_jax.config import set_by_path
from fedsim_jax.data.sources import digits
from fedsim_jax.experiment import build_federated_dataset, run_experiment
from tests.goldens.cases import load_config_file

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example(heading: str) -> tuple[str, str, dict[str, str], str]:
  """The section `heading` of the README: its module's file name, its Python code, the
  `--config.` overrides of its command, and that command's `--config`."""
  with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  section = text[text.index(f'### {heading}\n') :]
  section = section[: section.index('\n#', 1)]
  file_name = re.search(r'Saved as `(my_package/\w+\.py)`', section).group(1)
  code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  command = re.search(r'```bash\n(.*?)```', section, re.S).group(1).replace('\\\n', ' ')
  args = shlex.split(command)
  config = next(a.split('=', 1)[1] for a in args if a.startswith('--config='))
  overrides = dict(a[len('--config.') :].split('=', 1) for a in args if a.startswith('--config.'))
  return file_name, code, overrides, config


def _config(heading: str, tmp_path, monkeypatch):
  """The config of the README command of `heading`, with its module saved under `tmp_path`
  (importable as the command names it)."""
  file_name, code, overrides, config_name = _example(heading)
  path = tmp_path / file_name
  path.parent.mkdir(exist_ok=True)
  (path.parent / '__init__.py').write_text('')
  path.write_text(code)
  monkeypatch.syspath_prepend(str(tmp_path))
  for name in [m for m in sys.modules if m == 'my_package' or m.startswith('my_package.')]:
    monkeypatch.delitem(sys.modules, name)
  importlib.invalidate_caches()
  config = load_config_file(cli.config_module_file(config_name) or config_name)
  for key, text in overrides.items():
    if key != 'data.data_dir':
      try:
        value = ast.literal_eval(text)
      except (ValueError, SyntaxError):
        value = text
      set_by_path(config, key, value)
  config.run.num_rounds, config.run.eval_every = 4, 2
  config.client.local_steps = 5
  return config, overrides


def test_the_readme_partitioner_example_partitions_and_runs(digits_data_dir, tmp_path, monkeypatch):
  config, overrides = _config('New partitioner', tmp_path, monkeypatch)
  assert overrides['partition.module'] == 'my_package.my_partitioner'
  config.data.name, config.data.data_dir = 'digits', str(digits_data_dir)
  config.data.num_clients = 10
  config.algorithm.kwargs.cohort_size = 5
  federation = build_federated_dataset(config)
  assert federation.client_sizes.sum() == 1500 and federation.num_clients == 10
  # mixed=0: consecutive blocks of the label-sorted examples.
  config.partition.kwargs.mixed = 0.0
  blocks = build_federated_dataset(config)
  labels = [blocks.client_examples(c)[1] for c in range(10)]
  assert all(a.max() <= b.min() for a, b in zip(labels, labels[1:]))
  mixed = [federation.client_examples(c)[1] for c in range(10)]
  assert any(a.max() > b.min() for a, b in zip(mixed, mixed[1:]))
  config.partition.kwargs.mixed = float(overrides['partition.kwargs.mixed'])
  summary = run_experiment(config, tmp_path / 'run')
  assert summary['status'] == 'completed' and summary['final_version'] == 4


def test_the_readme_dataset_example_loads_and_runs(tmp_path, monkeypatch):
  config, overrides = _config('New dataset', tmp_path, monkeypatch)
  assert overrides['data.module'] == 'my_package.my_dataset'
  assert config.data.name == 'noisy_digits' and config.data.kwargs.noise == 40
  config.algorithm.kwargs.cohort_size = 5
  federation = build_federated_dataset(config)
  clean = digits()
  assert federation.num_clients == 20 and federation.client_sizes.sum() == clean.train_y.size
  noisy = np.concatenate([federation.client_examples(c)[0] for c in range(20)])
  assert noisy.dtype == np.uint8 and noisy.shape[1:] == clean.train_x.shape[1:]
  assert not np.isin(noisy.reshape(len(noisy), -1), clean.train_x.reshape(1500, -1)).all()
  summary = run_experiment(config, tmp_path / 'run')
  assert summary['status'] == 'completed' and summary['final_version'] == 4


@pytest.mark.parametrize(
  'heading, section', [('New model', 'model'), ('New latency model', 'latency')]
)
def test_the_readme_model_and_latency_model_examples_run_as_their_commands_select_them(
  digits_data_dir, tmp_path, monkeypatch, heading, section
):
  config, overrides = _config(heading, tmp_path, monkeypatch)
  kwargs = {
    path.rsplit('.', 1)[1]: ast.literal_eval(text)
    for path, text in overrides.items()
    if path.startswith(f'{section}.kwargs.')
  }
  assert kwargs and overrides[f'{section}.module'] == config[section].module
  config.data.name, config.data.data_dir = 'digits', str(digits_data_dir)
  config.data.num_clients = 10
  config.algorithm.kwargs.cohort_size = 5
  config.client.local_steps, config.run.num_rounds, config.run.eval_every = 10, 6, 6
  summary = run_experiment(config, tmp_path / 'run')
  assert summary['status'] == 'completed'
  with open(tmp_path / 'run' / 'config.json') as f:
    resolved = json.load(f)[section]
  assert resolved['name'] == overrides[f'{section}.name']
  assert {k: resolved['kwargs'][k] for k in kwargs} == kwargs
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    first, last = (json.loads(line)['test_accuracy'] for line in f)
  assert last > first + 0.2  # it trains


@pytest.mark.parametrize(
  'heading', ['New partitioner', 'New dataset', 'New model', 'New latency model']
)
def test_the_readme_examples_are_complete_modules(heading):
  _, code, _, _ = _example(heading)
  compile(code, heading, 'exec')
  assert 'register(' in code and 'Settings' in code
