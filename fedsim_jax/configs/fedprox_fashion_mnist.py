"""FedProx (Li et al. 2020) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's setting (`fedasmu_fashion_mnist_config`: Table 5's values, device speeds 5x apart,
Dirichlet label skew) with synchronous rounds of 10 devices for T = 500 rounds. FedProx's
mu = `algorithm.kwargs.proximal_strength`: FedASMU tunes it without reporting the value; 0.01 is
from FedProx's grid {0.001, 0.01, 0.1, 1}.
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config


def get_config():
  config = fedasmu_fashion_mnist_config('fedprox')
  config.algorithm.kwargs.proximal_strength = 0.01  # mu
  config.algorithm.kwargs.cohort_size = 10  # devices per round (FedASMU does not state it)
  return config
