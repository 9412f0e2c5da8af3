"""FedSA (Chen, Mao and Ma 2021) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's asynchronous setting (`fedasmu_fashion_mnist_config` and `fedasmu_trigger`: Table 5's
values, device speeds 5x apart, Dirichlet label skew, at most 10 devices training, its periodic
trigger). FedSA
aggregates every M = 5 arrivals (FedSA derives M from its convergence-time bound; 5 is an
assumption), weights each update by its examples and (staleness + 1)^-0.5, and discards updates
staler than tau_0 = 99 (FedASMU's bound).
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config, fedasmu_trigger


def get_config(reading: str = 'tables'):
  config = fedasmu_fashion_mnist_config('fedsa', **fedasmu_trigger(reading))
  config.algorithm.kwargs.buffer_size = 5  # M
  config.algorithm.kwargs.staleness = 'polynomial'
  config.algorithm.kwargs.staleness_a = 0.5
  config.algorithm.kwargs.max_staleness = 98  # t - o + 1 > tau = 99 is discarded (Table 5)
  config.run.num_rounds = 5000  # "5000 ... for asynchronous approaches" (appendix)
  config.run.eval_every = 100
  return config
