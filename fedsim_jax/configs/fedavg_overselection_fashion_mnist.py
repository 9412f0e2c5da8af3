"""FedAvg with over-selection (Bonawitz et al. 2019) under the straggler paper's latency.

Each round samples B_t = 12 clients and aggregates the first B = 10 to report; the other two are
stragglers and their updates are dropped (the straggler paper's "FedAvg + over-selection"
baseline, which uses B_t = 1.2 B). Latency: the `per-example` log-normal model (Table 1).
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedavg')
  config.client.local_epochs = 1.0
  config.client.local_steps = None
  config.algorithm.kwargs.cohort_size = 10
  config.algorithm.kwargs.num_selected = 12
  config.latency.name = 'lognormal'
  config.latency.kwargs.model = 'per_example'
  config.run.num_rounds = 100
  config.run.eval_every = 10
  return config
