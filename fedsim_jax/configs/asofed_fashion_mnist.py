"""ASO-Fed (Chen et al. 2020) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's asynchronous setting (`fedasmu_fashion_mnist_config` and `fedasmu_trigger`: Table 5's
values, device speeds 5x apart, Dirichlet label skew, at most 10 devices training, tau = 99, its
periodic trigger).
ASO-Fed applies one update at a time with weight n_k / n; lambda = 0.01, beta = 0.5 and the
delay-dependent step size (algorithms/asofed.py).
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config, fedasmu_trigger


def get_config(reading: str = 'tables'):
  config = fedasmu_fashion_mnist_config('asofed', **fedasmu_trigger(reading))
  config.algorithm.kwargs.proximal = 0.01  # lambda
  config.algorithm.kwargs.decay = 0.5  # beta
  config.algorithm.kwargs.max_staleness = 98  # t - o + 1 > tau = 99 is discarded (Table 5)
  config.run.num_rounds = 5000  # "5000 ... for asynchronous approaches" (appendix)
  config.run.eval_every = 100
  return config
