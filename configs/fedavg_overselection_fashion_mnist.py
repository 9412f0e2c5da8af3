"""FedAvg with over-selection (Bonawitz et al. 2019) under the straggler paper's latency.

Each round samples B_t = 12 clients and aggregates the first B = 10 to report; the other two are
stragglers and their updates are dropped (the straggler paper's "FedAvg + over-selection"
baseline, which uses B_t = 1.2 B). Latency: the `per-example` log-normal model (Table 1).
"""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm = 'fedavg'
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.data.partition = 'dirichlet'
  config.data.concentration = 0.5
  config.model.name = 'mlp'
  config.client.learning_rate = 0.05
  config.client.local_epochs = 1.0
  config.client.local_steps = None
  config.scheduler.cohort_size = 10
  config.scheduler.num_selected = 12
  config.latency.model = 'lognormal'
  config.latency.lognormal.model = 'per_example'
  config.run.num_rounds = 100
  config.run.eval_every = 10
  config.run.target_accuracy = 0.8
  return config
