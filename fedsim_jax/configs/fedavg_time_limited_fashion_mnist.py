"""FedAvg with time-limited clients, the straggler paper's baseline (Sec. 2.1).

Clients run as many local steps as fit in the population-wide 75th percentile of one local
epoch's on-device compute time (estimated from the latency model before the run; communication
does not count against it), so fast clients train past one epoch and stragglers stop early.
Latency: the `per-example` log-normal model (Table 1).
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fedavg')
  config.client.local_steps = None
  config.algorithm.kwargs.cohort_size = 10
  config.algorithm.kwargs.time_limit_percentile = 75.0
  config.latency.name = 'lognormal'
  config.latency.kwargs.model = 'per_example'
  config.run.num_rounds = 100
  config.run.eval_every = 10
  return config
