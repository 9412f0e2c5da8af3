"""FARe-DUST (Hard et al., "Learning from straggler clients", Sec. 2.2, Algorithms 1 and 3)
under the paper's `per-example` log-normal latency (Table 1).

Each round samples B_t = 12 clients and advances the global model with FedAdam on the first
B = 10 to report (B_t = 1.2 B, as the paper's 60/50, 24/20, 120/100 in Table 10). Late
stragglers are summed into the deltas of the last k rounds; every client distils (rho) from a
teacher made of one historical delta applied to the latest weights; the EMA of the global
weights is evaluated. k, rho and beta are the paper's EMNIST values (Tables 16-17); the server
learning rate, eps and the client learning rate are the Fashion-MNIST FedAdam starting points
of configs/fedadam_fashion_mnist.py (the paper's per-task FedAdam values are in Table 11).
Sums are unweighted, as in Algorithm 1.
"""

from fedsim_jax.config import fashion_mnist_config


def get_config():
  config = fashion_mnist_config('fare_dust')
  config.client.local_epochs = 1.0  # the paper trains one local epoch
  config.client.local_steps = None
  config.algorithm.kwargs.server_learning_rate = 0.01
  config.algorithm.kwargs.b1 = 0.9
  config.algorithm.kwargs.b2 = 0.99
  config.algorithm.kwargs.eps = 1e-3
  config.algorithm.kwargs.cohort_size = 10
  config.algorithm.kwargs.num_selected = 12
  config.algorithm.kwargs.weighting = 'uniform'
  config.algorithm.kwargs.history_length = 50
  config.algorithm.kwargs.rho = 0.1
  config.algorithm.kwargs.ema_decay = 0.99
  config.latency.name = 'lognormal'
  config.latency.kwargs.model = 'per_example'
  config.run.num_rounds = 100
  config.run.eval_every = 10
  return config
