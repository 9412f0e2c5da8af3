"""FedAT (Chai et al. 2021) on Fashion-MNIST: clients tiered by speed within a factor v = 2.

Per-step times are normal (mean 0.1 s, sigma 0.3 mean) with 5% jitter, which puts 100 clients
into a few tiers; each tier runs synchronous rounds of 5 clients (FedCompass's FedAT baseline
uses v = 2). Under exponential speeds the fastest tier updates hundreds of times per slow-tier
round and FedAT's reversed weights then favour the stalest tier.
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedat')
  config.client.local_steps = 20
  config.algorithm.kwargs.cohort_size = 5
  config.algorithm.kwargs.tier_ratio = 2.0
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.mean = 0.1
  config.latency.kwargs.jitter = 0.05
  config.run.num_rounds = 600
  config.run.eval_every = 50
  return config
