"""The demo: FedAvg on Fashion-MNIST, 100 clients (Dirichlet 0.5), 10 clients per round, MLP.

Clients differ in speed (per-step times drawn from N(0.1 s, (0.03 s)^2), 5% per-task jitter),
so virtual time per round is set by each round's slowest client.
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
  config.client.batch_size = 32
  config.client.local_steps = 20
  config.scheduler.cohort_size = 10
  config.latency.model = 'per_step'
  config.latency.per_step.distribution = 'normal'
  config.latency.per_step.mean = 0.1
  config.latency.per_step.spread = 0.3
  config.latency.per_step.jitter = 0.05
  config.run.num_rounds = 300
  config.run.eval_every = 10
  config.run.target_accuracy = 0.8
  return config
