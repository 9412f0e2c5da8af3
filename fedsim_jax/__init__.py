"""fedsim_jax: a JAX-vectorised simulator for federated learning on heterogeneous clients.

Layers (each imports only those above it in this list):
  data -> models -> client -> executor -> runtime -> strategy -> metrics -> experiment
"""

__version__ = '0.1.0'
