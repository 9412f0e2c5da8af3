"""FedAT (Chai et al. 2021) on Fashion-MNIST: clients tiered by speed within a factor v = 2.

Per-step times are normal (mean 0.1 s, sigma 0.3 mean) with 5% jitter, which puts 100 clients
into a few tiers; each tier runs synchronous rounds of 5 clients (FedCompass's FedAT baseline
uses v = 2). Under exponential speeds the fastest tier updates hundreds of times per slow-tier
round and FedAT's reversed weights then favour the stalest tier.
"""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm = 'fedat'
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.data.partition = 'dirichlet'
  config.data.concentration = 0.5
  config.model.name = 'mlp'
  config.client.learning_rate = 0.05
  config.client.local_steps = 20
  config.scheduler.cohort_size = 5
  config.scheduler.tier_ratio = 2.0
  config.latency.per_step.distribution = 'normal'
  config.latency.per_step.mean = 0.1
  config.latency.per_step.jitter = 0.05
  config.run.num_rounds = 600
  config.run.eval_every = 50
  config.run.target_accuracy = 0.8
  return config
