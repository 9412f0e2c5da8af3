"""FedAdam (Reddi et al. 2021) on the demo federation: Fashion-MNIST, 100 clients, MLP."""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm = 'fedadam'
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.data.partition = 'dirichlet'
  config.data.concentration = 0.5
  config.model.name = 'mlp'
  config.client.learning_rate = 0.05
  config.client.local_steps = 20
  config.server.learning_rate = 0.01
  config.server.eps = 1e-3
  config.scheduler.cohort_size = 10
  config.run.num_rounds = 100
  config.run.target_accuracy = 0.8
  return config
