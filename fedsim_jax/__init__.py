"""fedsim_jax: a JAX-vectorised simulator for federated learning on heterogeneous clients.

Layers, bottom to top; a layer imports only the rows below it (tests/test_import_graph.py):
  settings, tree               (ConfigError and typed settings; pytree helpers)
  data, models                 (side by side: neither imports the other)
  client
  executor
  metrics
  runtime
  strategy                     (schedulers, aggregators, client objectives)
  algorithms                   (one module per family: settings + registered factory)
  config, compilation_cache    (side by side)
  experiment
  cli
"""

__version__ = '0.1.0'
