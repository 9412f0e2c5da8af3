"""FedAdam (Reddi et al. 2021) on the demo federation: Fashion-MNIST, 100 clients, MLP."""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedadam')
  config.client.local_steps = 20
  config.algorithm.kwargs.server_learning_rate = 0.01
  config.algorithm.kwargs.eps = 1e-3
  config.algorithm.kwargs.cohort_size = 10
  config.run.num_rounds = 100
  return config
