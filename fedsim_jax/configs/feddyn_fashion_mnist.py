"""FedDyn (Acar et al. 2021) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's setting (`fedasmu_fashion_mnist_config`: Table 5's values, device speeds 5x apart,
Dirichlet label skew) with synchronous rounds of 10 devices for T = 500 rounds. FedDyn's
alpha = 0.01 and the unweighted average of its Algorithm 1 (`algorithm.kwargs.weighting='uniform'`).
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config


def get_config():
  config = fedasmu_fashion_mnist_config('feddyn')
  config.algorithm.kwargs.alpha = 0.01
  config.algorithm.kwargs.weighting = 'uniform'
  config.algorithm.kwargs.cohort_size = 10  # devices per round (FedASMU does not state it)
  return config
