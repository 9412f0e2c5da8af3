"""The package installs anywhere: a wheel built from this checkout, installed into a fresh
virtualenv outside it with nothing downloaded, runs its commands on its shipped configs.

The fresh environment gets the heavy dependencies (jax, flax, tfds, ...) from this project's
virtualenv through a `.pth` line, which adds that site-packages folder to `sys.path` without
processing its own `.pth` files: the checkout's editable `fedsim_jax` stays invisible.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGED_CONFIGS = ROOT / 'fedsim_jax' / 'configs'
CONFIG_NAMES = sorted(p.stem for p in PACKAGED_CONFIGS.glob('*.py') if not p.stem.startswith('_'))


def _run(args: list, cwd: pathlib.Path, timeout: float = 120) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
  return subprocess.run(
    [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
  )


@pytest.fixture(scope='module')
def wheel(tmp_path_factory) -> pathlib.Path:
  """A wheel built offline from a copy of the package's sources (no stale build/ folder)."""
  base = tmp_path_factory.mktemp('wheel')
  source = base / 'source'
  source.mkdir()
  shutil.copytree(
    ROOT / 'fedsim_jax',
    source / 'fedsim_jax',
    ignore=shutil.ignore_patterns('__pycache__', '*.pyc'),
  )
  for name in ('pyproject.toml', 'README.md'):
    shutil.copy(ROOT / name, source / name)
  out = base / 'dist'
  result = _run(
    [
      sys.executable,
      '-m',
      'pip',
      'wheel',
      '--no-deps',
      '--no-index',
      '--no-build-isolation',
      '--quiet',
      '-w',
      out,
      source,
    ],
    cwd=base,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  (found,) = out.glob('fedsim_jax-*.whl')
  return found


@pytest.fixture(scope='module')
def fresh_env(wheel, tmp_path_factory) -> pathlib.Path:
  """A virtualenv outside the checkout with the wheel installed (console scripts included)."""
  env = tmp_path_factory.mktemp('fresh') / 'env'
  result = _run([sys.executable, '-m', 'venv', '--without-pip', env], cwd=env.parent)
  assert result.returncode == 0, result.stderr
  python = env / 'bin' / 'python'
  site = _run(
    [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], cwd=env.parent
  )
  assert site.returncode == 0, site.stderr
  project_site = sysconfig.get_paths()['purelib']
  pathlib.Path(site.stdout.strip(), '_project_dependencies.pth').write_text(project_site + '\n')
  result = _run(
    [
      sys.executable,
      '-m',
      'pip',
      '--python',
      python,
      'install',
      '--no-deps',
      '--no-index',
      '--quiet',
      wheel,
    ],
    cwd=env.parent,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return env


def test_the_wheel_holds_the_configs_and_their_data(wheel):
  names = set(zipfile.ZipFile(wheel).namelist())
  for config in CONFIG_NAMES:
    assert f'fedsim_jax/configs/{config}.py' in names
  assert 'fedsim_jax/configs/__init__.py' in names
  assert 'fedsim_jax/configs/traces/example_trace.json' in names
  assert 'fedsim_jax/run.py' in names
  entry_points = next(n for n in names if n.endswith('.dist-info/entry_points.txt'))
  scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
  for script in ('fedsim-run', 'fedsim-prepare', 'fedsim-plot', 'fedsim-compare'):
    assert f'{script} = ' in scripts


def test_the_installed_package_is_the_wheel_not_the_checkout(fresh_env, tmp_path):
  code = (
    'import sys, importlib.resources as r, fedsim_jax\n'
    "assert 'jax' not in sys.modules\n"
    'print(fedsim_jax.__file__)\n'
    "print(r.files('fedsim_jax.configs').joinpath('traces', 'example_trace.json').is_file())\n"
  )
  result = _run([fresh_env / 'bin' / 'python', '-c', code], cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  location, trace_found = result.stdout.split()
  assert pathlib.Path(location).resolve().is_relative_to(fresh_env.resolve())
  assert trace_found == 'True'


def test_fedsim_run_runs_a_packaged_config_by_module_name(fresh_env, digits_data_dir, tmp_path):
  workdir = tmp_path / 'run'
  result = _run(
    [
      fresh_env / 'bin' / 'fedsim-run',
      '--config=fedsim_jax.configs.fedavg_fashion_mnist',
      f'--workdir={workdir}',
      '--config.data.name=digits',
      f'--config.data.data_dir={digits_data_dir}',
      '--config.data.num_clients=6',
      '--config.algorithm.kwargs.cohort_size=3',
      '--config.model.kwargs.hidden_sizes=(16,)',
      '--config.client.local_steps=2',
      '--config.client.batch_size=8',
      '--config.run.num_rounds=2',
      '--config.run.eval_every=1',
      '--quiet',
    ],
    cwd=tmp_path,
    timeout=240,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((workdir / 'summary.json').read_text())
  assert summary['status'] == 'completed'
  assert f'outputs: {workdir}' in result.stdout


def test_fedsim_prepare_without_its_source_names_every_option(fresh_env, tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  result = _run(
    [
      fresh_env / 'bin' / 'fedsim-prepare',
      '--dataset=fashion_mnist',
      f'--data_dir={tmp_path / "data"}',
      f'--source={empty}',
    ],
    cwd=tmp_path,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  for option in ('dataset-fashion-mnist', '--source=DIR', '--from_tfds'):
    assert option in lines[0]
  assert not (tmp_path / 'data').exists()


def test_the_checkout_configs_folder_links_to_the_package():
  link = ROOT / 'configs'
  assert link.is_symlink() and os.readlink(link) == os.path.join('fedsim_jax', 'configs')


@pytest.mark.parametrize('name', CONFIG_NAMES)
def test_shipped_configs_import_only_the_package(name):
  tree = ast.parse((PACKAGED_CONFIGS / f'{name}.py').read_text(encoding='utf-8'))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      modules = [node.module or '']
    else:
      continue
    for module in modules:
      assert module.split('.')[0] in ('fedsim_jax', '__future__'), f'{name} imports {module}'


def test_the_license_and_citation_match_pyproject():
  import tomllib
  import yaml

  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    project = tomllib.load(f)['project']
  with open(os.path.join(ROOT, 'LICENSE'), encoding='utf-8') as f:
    license_text = f.read()
  assert project['license'] == 'Apache-2.0'
  assert 'Apache License' in license_text and 'Version 2.0, January 2004' in license_text
  assert 'END OF TERMS AND CONDITIONS' in license_text
  with open(os.path.join(ROOT, 'CITATION.cff'), encoding='utf-8') as f:
    citation = yaml.safe_load(f)
  assert citation['cff-version'] == '1.2.0'
  assert citation['version'] == project['version']
  assert citation['license'] == project['license']
  assert citation['title'].startswith(project['name'])
