"""Algorithms: one module per family, each a settings dataclass and a registered factory.

`names()` lists every registered algorithm; `resolve_settings(name, kwargs, run)` validates a
config's `algorithm.kwargs`; `build(settings, context)` returns the `Algorithm` (scheduler,
aggregator, client update). See `base.py` for writing one.
"""

import importlib
import pkgutil

from fedsim_jax.algorithms.base import (
  Algorithm,
  AlgorithmSpec,
  BuildContext,
  RunFacts,
  build,
  get_spec,
  import_module,
  names,
  register,
  resolve_settings,
)

# Every family module of this package registers its algorithms when imported: a new family is
# one new file here, with no list to extend.
for _module in pkgutil.iter_modules(__path__):
  if _module.name not in ('base', 'groups'):
    importlib.import_module(f'{__name__}.{_module.name}')

__all__ = [
  'Algorithm',
  'AlgorithmSpec',
  'BuildContext',
  'RunFacts',
  'build',
  'get_spec',
  'import_module',
  'names',
  'register',
  'resolve_settings',
]
