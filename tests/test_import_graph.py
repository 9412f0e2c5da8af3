"""The package's layers import only downwards: read from the source with `ast`, nothing imported.

A layer is the first name under `fedsim_jax` (`fedsim_jax.runtime.latency.registry` is in
`runtime`). Modules of one layer may import each other; a layer may import the layers of lower
tiers, never its own tier's other layers or a higher tier. Every import counts: top-level ones,
deferred ones inside functions, relative ones and `from fedsim_jax import <submodule>`.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / 'fedsim_jax'

# Bottom to top. `__init__` is the package's own module (its version): anyone may import it.
# `algorithms` may not exist yet; a tier lists it so that it lands above `strategy`.
TIERS = (
  ('settings', 'str_enum', 'tree', 'flag_help'),
  ('registry',),  # named plugins with typed settings (builds on settings)
  ('checkpointing', 'distributed', 'interrupts', 'provenance', 'workdir'),
  ('data', 'models'),
  ('client',),
  ('executor',),
  ('metrics',),
  ('runtime',),
  ('transforms',),  # update transforms on any aggregator: privacy, robustness, compression
  ('strategy',),
  ('algorithms',),
  ('moved_settings', 'run_settings'),  # the config's settings classes and its moved names
  ('config', 'compilation_cache', 'saved_run'),
  ('run_spec',),  # the config resolved once, at the edge: what everything below receives
  (
    'memory_estimate',
    'lifecycle',
  ),  # a built run's life in its workdir; `experiment` builds runs and starts them
  # The shipped configs build on `config` alone; the library never imports one by name.
  ('build',),  # config -> the parts of a run, writing nothing
  ('experiment', 'configs'),
  ('analysis',),  # reads run directories: metrics.writers, never experiment
  ('cli',),
  ('run',),  # the experiment binary (`fedsim-run`): flags, then `experiment`
  ('sweep',),  # `fedsim-sweep`: many runs of `run`'s config, as processes
  ('__init__',),  # the package's facade: `import fedsim_jax as fs`, its public names
)
# Layers not checked, which no layer may import (none today).
EXCLUDED: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Import:
  module: str  # the importing module
  path: str  # its file, relative to the package's parent
  line: int
  target: str  # the imported module (a submodule where `from x import y` names one)


def _module_names(package: pathlib.Path) -> dict[str, pathlib.Path]:
  """Dotted name -> file of every module under `package` (a package's name: its __init__)."""
  names = {}
  for path in sorted(package.rglob('*.py')):
    parts = path.relative_to(package.parent).with_suffix('').parts
    if parts[-1] == '__init__':
      parts = parts[:-1]
    names['.'.join(parts)] = path
  return names


def collect_imports(package: pathlib.Path) -> list[Import]:
  """Every import of `package`'s own modules, from every module under it."""
  root = package.name
  modules = _module_names(package)
  found = []
  for module, path in modules.items():
    is_package = path.name == '__init__.py'
    tree = ast.parse(path.read_text(encoding='utf-8'), filename=str(path))
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom):
        if node.level:
          anchor = module.split('.') if is_package else module.split('.')[:-1]
          anchor = anchor[: len(anchor) - (node.level - 1)]
          base = '.'.join(anchor + ([node.module] if node.module else []))
        else:
          base = node.module or ''
        # `from fedsim_jax import config` imports the module fedsim_jax.config.
        targets = [
          f'{base}.{alias.name}' if f'{base}.{alias.name}' in modules else base
          for alias in node.names
        ]
      else:
        continue
      relative_path = str(path.relative_to(package.parent))
      for target in targets:
        if target == root or target.startswith(root + '.'):
          found.append(Import(module, relative_path, node.lineno, target))
  return sorted(found, key=lambda imp: (imp.path, imp.line, imp.target))


def layer_of(module: str) -> str:
  parts = module.split('.')
  return parts[1] if len(parts) > 1 else '__init__'


def check_layers(
  imports: list[Import], tiers: tuple[tuple[str, ...], ...], excluded: tuple[str, ...]
) -> list[str]:
  """One line per import that goes up a tier, across a tier, into an excluded or unknown layer."""
  tier_of = {layer: i for i, tier in enumerate(tiers) for layer in tier}
  problems = []
  for imp in imports:
    source, target = layer_of(imp.module), layer_of(imp.target)
    where = f'{imp.path}:{imp.line}: {imp.module} imports {imp.target}'
    if source in excluded or source == target:
      continue
    if source not in tier_of:
      problems.append(f'{where}: layer {source!r} of the importer is in no tier')
    elif target in excluded:
      problems.append(f'{where}: layer {target!r} is leaving the package')
    elif target not in tier_of:
      problems.append(f'{where}: layer {target!r} is in no tier')
    elif tier_of[target] == tier_of[source]:
      problems.append(f'{where}: {target!r} is beside {source!r} (same tier)')
    elif tier_of[target] > tier_of[source]:
      problems.append(f'{where}: {target!r} is above {source!r}')
  return problems


def test_no_layer_imports_upwards():
  problems = check_layers(collect_imports(PACKAGE), TIERS, EXCLUDED)
  assert not problems, 'imports against the layering:\n' + '\n'.join(problems)


# Inside `algorithms` each paper (a module or a package) imports only the shared modules: the
# registry plumbing and the setting groups. What two papers share belongs to `strategy`.
SHARED_ALGORITHM_MODULES = ('base', 'groups')


def paper_of(module: str) -> str | None:
  """The paper (module or package under `algorithms`) of `module`; None outside them."""
  parts = module.split('.')
  if len(parts) < 3 or parts[1] != 'algorithms':
    return None
  return parts[2]


def check_papers(imports: list[Import]) -> list[str]:
  """One line per import of one paper's module by another paper's."""
  problems = []
  for imp in imports:
    source, target = paper_of(imp.module), paper_of(imp.target)
    if source is None or target is None or source == target:
      continue
    if source in SHARED_ALGORITHM_MODULES or target in SHARED_ALGORITHM_MODULES:
      continue
    problems.append(f'{imp.path}:{imp.line}: {imp.module} imports {imp.target} (another paper)')
  return problems


def test_no_paper_imports_another():
  problems = check_papers(collect_imports(PACKAGE))
  assert not problems, 'papers importing each other:\n' + '\n'.join(problems)


def test_check_papers_reports_a_paper_importing_another(tmp_path):
  package = tmp_path / 'fedsim_jax'
  _write(
    package,
    {
      '__init__.py': '',
      'algorithms/__init__.py': 'from fedsim_jax.algorithms import base\n',
      'algorithms/base.py': '',
      'algorithms/groups.py': 'from fedsim_jax.algorithms import base\n',
      'algorithms/fedx.py': 'from fedsim_jax.algorithms.groups import Base\n',
      'algorithms/paper/__init__.py': 'from fedsim_jax.algorithms.paper import part\n',
      'algorithms/paper/part.py': 'from fedsim_jax.algorithms.fedx import rule\n',
    },
  )
  assert check_papers(collect_imports(package)) == [
    'fedsim_jax/algorithms/paper/part.py:1: fedsim_jax.algorithms.paper.part imports '
    'fedsim_jax.algorithms.fedx (another paper)'
  ]


def test_every_layer_of_the_package_is_in_a_tier():
  layers = {layer_of(module) for module in _module_names(PACKAGE)}
  tiered = {layer for tier in TIERS for layer in tier}
  assert layers - set(EXCLUDED) <= tiered


def _write(package: pathlib.Path, files: dict[str, str]) -> None:
  for name, source in files.items():
    path = package / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding='utf-8')


@pytest.fixture
def synthetic(tmp_path):
  """A small `fedsim_jax` whose data layer imports upwards in every way the checker reads."""
  package = tmp_path / 'fedsim_jax'
  _write(
    package,
    {
      '__init__.py': '',
      'data/__init__.py': 'from fedsim_jax.data.x import gather\n',
      'data/x.py': """
        import numpy as np

        from fedsim_jax.data import y
        from fedsim_jax.executor import Executor


        def gather():
          from ..executor import bucketing
          import fedsim_jax.models.zoo
          from fedsim_jax import experiment, __version__
      """,
      'data/y.py': 'from . import x\n',
      'models/__init__.py': '',
      'models/zoo.py': 'from fedsim_jax.data import x\nfrom fedsim_jax.reproduce import sweep\n',
      'executor/__init__.py': 'from .bucketing import *\nfrom fedsim_jax.data.x import gather\n',
      'executor/bucketing.py': '',
      'experiment.py': 'from fedsim_jax import config, data, executor\n',
      'reproduce/__init__.py': '',
      'reproduce/sweep.py': 'from fedsim_jax import experiment\n',
      'plugins.py': 'import fedsim_jax.data\n',
    },
  )
  return package


def test_collect_reads_function_level_relative_and_submodule_imports(synthetic):
  got = {(imp.module, imp.line, imp.target) for imp in collect_imports(synthetic)}
  assert ('fedsim_jax.data.x', 5, 'fedsim_jax.executor') in got
  assert ('fedsim_jax.data.x', 9, 'fedsim_jax.executor.bucketing') in got  # relative, in a def
  assert ('fedsim_jax.data.x', 10, 'fedsim_jax.models.zoo') in got
  assert ('fedsim_jax.data.x', 11, 'fedsim_jax.experiment') in got  # a submodule by name
  assert ('fedsim_jax.data.x', 11, 'fedsim_jax') in got  # a name of the package itself
  assert ('fedsim_jax.data.y', 1, 'fedsim_jax.data.x') in got
  assert ('fedsim_jax.executor', 1, 'fedsim_jax.executor.bucketing') in got
  # `config` is no module of this package: the import is of the package itself.
  assert ('fedsim_jax.experiment', 1, 'fedsim_jax') in got
  assert not any(target.startswith('numpy') for _, _, target in got)


def test_check_reports_each_import_against_the_layering(synthetic):
  problems = check_layers(collect_imports(synthetic), TIERS, ('reproduce',))
  assert problems == [
    "fedsim_jax/data/x.py:5: fedsim_jax.data.x imports fedsim_jax.executor: 'executor' is "
    "above 'data'",
    'fedsim_jax/data/x.py:9: fedsim_jax.data.x imports fedsim_jax.executor.bucketing: '
    "'executor' is above 'data'",
    "fedsim_jax/data/x.py:10: fedsim_jax.data.x imports fedsim_jax.models.zoo: 'models' is "
    "beside 'data' (same tier)",
    "fedsim_jax/data/x.py:11: fedsim_jax.data.x imports fedsim_jax: '__init__' is above 'data'",
    "fedsim_jax/data/x.py:11: fedsim_jax.data.x imports fedsim_jax.experiment: 'experiment' is "
    "above 'data'",
    "fedsim_jax/experiment.py:1: fedsim_jax.experiment imports fedsim_jax: '__init__' is above "
    "'experiment'",
    "fedsim_jax/models/zoo.py:1: fedsim_jax.models.zoo imports fedsim_jax.data.x: 'data' is "
    "beside 'models' (same tier)",
    'fedsim_jax/models/zoo.py:2: fedsim_jax.models.zoo imports fedsim_jax.reproduce.sweep: '
    "layer 'reproduce' is leaving the package",
    "fedsim_jax/plugins.py:1: fedsim_jax.plugins imports fedsim_jax.data: layer 'plugins' of "
    'the importer is in no tier',
  ]


def test_check_passes_downward_imports(synthetic):
  (synthetic / 'data' / 'x.py').write_text('from fedsim_jax.data import y\n', encoding='utf-8')
  (synthetic / 'models' / 'zoo.py').write_text('import fedsim_jax.settings\n', encoding='utf-8')
  (synthetic / 'experiment.py').write_text(
    'from fedsim_jax import data, executor\n', encoding='utf-8'
  )
  (synthetic / 'plugins.py').unlink()
  assert check_layers(collect_imports(synthetic), TIERS, ('reproduce',)) == []
