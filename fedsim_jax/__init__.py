"""fedsim_jax: a JAX-vectorised simulator for federated learning on heterogeneous clients.

Layers, bottom to top; a layer imports only the rows below it (tests/test_import_graph.py):
  settings, tree               (ConfigError and typed settings; pytree helpers)
  checkpointing, interrupts, workdir   (a run's lifecycle: checkpoints, signals, its folder)
  data, models                 (side by side: neither imports the other)
  client
  executor
  metrics
  runtime
  strategy                     (schedulers, aggregators, client objectives)
  algorithms                   (one module per family: settings + registered factory)
  config, compilation_cache, memory_estimate, saved_run
  experiment
  cli
  fedsim_jax                   (this facade: `load_run`)
"""

from typing import Any

__version__ = '0.1.0'
__all__ = ['load_run']


def __getattr__(name: str) -> Any:
  # Imported on first use, so that `import fedsim_jax.<layer>` stays light.
  if name == 'load_run':
    from fedsim_jax.saved_run import load_run

    return load_run
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
