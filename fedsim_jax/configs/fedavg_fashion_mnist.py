"""The demo: FedAvg on Fashion-MNIST, 100 clients (Dirichlet 0.5), 10 clients per round, MLP.

Clients differ in speed (per-step times drawn from N(0.1 s, (0.03 s)^2), 5% per-task jitter),
so virtual time per round is set by each round's slowest client.
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedavg')
  config.client.local_steps = 20
  config.algorithm.kwargs.cohort_size = 10
  config.latency.name = 'per_step'
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.mean = 0.1
  config.latency.kwargs.spread = 0.3
  config.latency.kwargs.jitter = 0.05
  config.run.num_rounds = 300
  config.run.eval_every = 10
  return config
