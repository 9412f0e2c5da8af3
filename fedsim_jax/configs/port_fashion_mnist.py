"""PORT (Su and Li 2022) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's asynchronous setting (`fedasmu_fashion_mnist_config` and `fedasmu_trigger`: Table 5's
values, device speeds 5x apart, Dirichlet label skew, at most 10 devices training, tau = 99, its
periodic trigger).
PORT aggregates buffers of 5 updates (PLATO's PORT aggregates a minimum number of clients; 5 is
an assumption) with PLATO's weights (similarity 1, staleness 1, bound 10).
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config, fedasmu_trigger


def get_config(reading: str = 'tables'):
  config = fedasmu_fashion_mnist_config('port', **fedasmu_trigger(reading))
  config.algorithm.kwargs.buffer_size = 5
  config.algorithm.kwargs.max_staleness = 98  # t - o + 1 > tau = 99 is discarded (Table 5)
  config.run.num_rounds = 5000  # "5000 ... for asynchronous approaches" (appendix)
  config.run.eval_every = 100
  return config
