"""FedAdam with over-selection, the straggler paper's "FedAdam + over-sel." baseline (Hard et
al., Sec. 2.1 and Table 11), under its `per-example` log-normal latency (Table 1).

Each round samples B_t = 12 clients and applies the FedAdam server update (Reddi et al. 2021)
to the first B = 10 to report (B_t = 1.2 B); the stragglers' updates are dropped. The server
and client settings match configs/fare_dust_fashion_mnist.py, so that FARe-DUST with rho = 0
and EMA decay 0 runs exactly this algorithm.
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedadam')
  config.client.local_epochs = 1.0  # the paper trains one local epoch
  config.client.local_steps = None
  config.algorithm.kwargs.server_learning_rate = 0.01
  config.algorithm.kwargs.b1 = 0.9
  config.algorithm.kwargs.b2 = 0.99
  config.algorithm.kwargs.eps = 1e-3
  config.algorithm.kwargs.cohort_size = 10
  config.algorithm.kwargs.num_selected = 12
  config.algorithm.kwargs.weighting = 'uniform'
  config.latency.name = 'lognormal'
  config.latency.kwargs.model = 'per_example'
  config.run.num_rounds = 100
  config.run.eval_every = 10
  return config
