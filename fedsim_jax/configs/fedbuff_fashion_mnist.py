"""FedBuff (Nguyen et al. 2022) on Fashion-MNIST: 1,000 clients (IID), 100 in flight, K = 10.

The server averages each buffer of K = 10 updates scaled by (staleness + 1)^-0.5 (FedBuff's
staleness scaling) and applies it with SGD. Latency: the straggler paper's `per-example'
log-normal model (communication + overhead + per-example time x examples).
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedbuff')
  config.data.num_clients = 1000
  config.partition.name = 'iid'
  config.client.local_steps = 10
  config.algorithm.kwargs.server_optimizer = 'sgd'
  config.algorithm.kwargs.server_learning_rate = 1.0
  config.algorithm.kwargs.staleness = 'polynomial'
  config.algorithm.kwargs.staleness_a = 0.5
  config.algorithm.kwargs.normalization = 'count'
  config.algorithm.kwargs.concurrency = 100
  config.algorithm.kwargs.buffer_size = 10
  config.algorithm.kwargs.weighting = 'uniform'
  config.latency.name = 'lognormal'
  config.latency.kwargs.model = 'per_example'
  config.run.num_rounds = 300
  config.run.eval_every = 25
  return config
