"""`benchmarks/accelerator_wheels.py` names exactly the packages `benchmarks/accelerator_check.py`
imports beyond what a bare GPU machine comes with: in a virtualenv of the machine's packages
and those wheels (`tests/bare_image.py`) every module the check imports loads, and without any
one of the wheels it does not."""

import ast
import os
import subprocess

import pytest

from benchmarks import accelerator_wheels
from tests import bare_image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, 'benchmarks', 'accelerator_check.py')


def check_imports() -> list[str]:
  """Every module `accelerator_check.py` imports, at its top and inside its functions."""
  with open(CHECK, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  modules = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules += [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != '__future__':
      modules.append(node.module)
  return sorted(set(modules))


def import_in(python: str, modules: list[str]) -> subprocess.CompletedProcess:
  """Imports `modules` (and `harness_lib`, found next to the check) with `python`."""
  code = 'import importlib, sys\nfor name in sys.argv[1:]:\n  importlib.import_module(name)\n'
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, os.path.dirname(CHECK)])}
  return subprocess.run(
    [python, '-c', code, *modules], env=env, capture_output=True, text=True, timeout=300
  )


@pytest.fixture(scope='module')
def bare_distributions():
  return bare_image.requirement_closure(accelerator_wheels.BARE)


def test_the_check_imports_in_the_bare_image_with_the_wheels(tmp_path, bare_distributions):
  modules = check_imports()
  assert {'harness_lib', 'fedsim_jax.experiment', 'jax'} <= set(modules)
  python = bare_image.make_bare_venv(
    str(tmp_path / 'venv'), bare_distributions | set(accelerator_wheels.WHEELS)
  )
  result = import_in(python, modules)
  assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize('left_out', accelerator_wheels.WHEELS)
def test_each_wheel_is_needed(tmp_path, bare_distributions, left_out):
  assert left_out not in {n.replace('-', '_') for n in bare_distributions}
  wheels = set(accelerator_wheels.WHEELS) - {left_out}
  python = bare_image.make_bare_venv(str(tmp_path / 'venv'), bare_distributions | wheels)
  result = import_in(python, check_imports())
  assert result.returncode != 0
  assert f"No module named '{left_out}'" in result.stderr


def test_the_wheels_are_pinned_as_in_the_constraints():
  pins = accelerator_wheels.pinned_versions()
  assert accelerator_wheels.requirements() == [
    f'{name}=={pins[accelerator_wheels.canonical(name)]}' for name in accelerator_wheels.WHEELS
  ]
  assert accelerator_wheels.requirements() == ['ml_collections==1.1.0', 'sortedcontainers==2.4.0']
