"""FedAsync (Xie et al. 2019) on Fashion-MNIST: 100 clients (Dirichlet 0.5), 10 in flight.

Mixing rate alpha * (staleness + 1)^-0.5 with alpha = 0.9 (FedCompass's FedAsync settings);
per-step times drawn from N(0.1 s, (0.03 s)^2) with 5% per-task jitter.
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedasync')
  config.client.local_steps = 20
  config.algorithm.kwargs.alpha = 0.9
  config.algorithm.kwargs.staleness = 'polynomial'
  config.algorithm.kwargs.staleness_a = 0.5
  config.algorithm.kwargs.concurrency = 10
  config.algorithm.kwargs.weighting = 'uniform'
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.mean = 0.1
  config.latency.kwargs.jitter = 0.05
  config.run.num_rounds = 1000  # server versions = client updates for FedAsync
  config.run.eval_every = 50
  return config
