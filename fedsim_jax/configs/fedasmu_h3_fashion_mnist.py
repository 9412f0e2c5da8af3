"""FedASMU-H3 (Liu et al. 2024, appendix time-slot ablation): the fresh model is requested at
the last but one local epoch.

LeNet-5 on Fashion-MNIST, 100 devices with Dirichlet label skew: the setting of
`fedasmu_fashion_mnist_config` (Table 5's values; the choices where the paper is silent are
documented there and in algorithms/fedasmu/server.py). The trigger (`fedasmu_trigger`) follows
Tables 5-6 (up to 10 devices every 10 s); pass `:appendix` after the file name for the appendix's one
device every 5 s.
"""

from fedsim_jax.config import fedasmu_fashion_mnist_config, fedasmu_trigger


def get_config(reading: str = 'tables'):
  return fedasmu_fashion_mnist_config('fedasmu_h3', alpha=0.6, **fedasmu_trigger(reading))
