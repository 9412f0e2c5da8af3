"""Algorithms: one module per family, each a settings dataclass and a registered factory.

`names()` lists every registered algorithm; `resolve_settings(name, kwargs, run)` validates a
config's `algorithm.kwargs`; `build(settings, context)` returns the `Algorithm` (scheduler,
aggregator, client update). See `base.py` for writing one.
"""

from fedsim_jax.algorithms import (  # noqa: F401  (each registers its algorithms)
  asofed,
  ccfedavg,
  fare_dust,
  feast_msg,
  fedasmu,
  fedasync,
  fedat,
  fedbuff,
  fedcompass,
  feddyn,
  fedopt,
  fedsa,
  moon,
  port,
)
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
