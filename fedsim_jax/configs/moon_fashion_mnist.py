"""MOON (Li, He and Song 2021) as a FedASMU baseline: LeNet-5 on Fashion-MNIST, 100 devices.

FedASMU's setting (`fedasmu_fashion_mnist_config`: Table 5's values, device speeds 5x apart,
Dirichlet label skew) with synchronous rounds of 10 devices for T = 500 rounds. MOON's mu = 1
and tau = 0.5 (MOON's settings); the representation is LeNet-5's 84-dim penultimate features
(no projection head, algorithms/moon.py).
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config


def get_config():
  config = fedasmu_fashion_mnist_config('moon')
  config.algorithm.kwargs.mu = 1.0
  config.algorithm.kwargs.temperature = 0.5
  config.algorithm.kwargs.cohort_size = 10  # devices per round (FedASMU does not state it)
  return config
