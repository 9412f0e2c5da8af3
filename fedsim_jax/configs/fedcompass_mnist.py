"""FedCompass (Li et al. 2024) on MNIST with the paper's CNN (Table 8) and Table 9 settings.

Five clients with the class partition (Algorithm 4), per-step times drawn from N(0.15 s,
(0.045 s)^2) with 5% per-round jitter (Section 5.4), Q in [40, 200], lambda = 1.2,
st(u) = 0.9 (u + 1)^-0.5, client Adam at 0.003 with batch 64. The CNN runs fastest on XLA:CPU
with the loop backend driving one jitted step at a time (`executor.step_loop='host'`, about 20x
a scanned task here). `--config.algorithm.name=fedcompass_m` / `fedcompass_n` swap the server
update (momentum 0.9 / normalized averaging).
"""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm.name = 'fedcompass'
  config.data.name = 'mnist'
  config.data.num_clients = 5
  config.partition.name = 'class'
  config.model.name = 'mnist_cnn'
  config.client.optimizer = 'adam'
  config.client.learning_rate = 0.003
  config.client.batch_size = 64
  config.client.local_steps = None
  config.algorithm.kwargs.alpha = 0.9
  config.algorithm.kwargs.staleness_a = 0.5
  config.algorithm.kwargs.server_momentum = 0.9
  config.algorithm.kwargs.q_min = 40
  config.algorithm.kwargs.q_max = 200
  config.algorithm.kwargs.latest_time_factor = 1.2
  config.algorithm.kwargs.weighting = 'num_examples'
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.mean = 0.15
  config.latency.kwargs.jitter = 0.05
  config.executor.backend = 'loop'
  config.executor.step_loop = 'host'
  config.run.num_rounds = None
  config.run.max_virtual_time = 600.0
  config.run.eval_every = 5
  config.run.target_accuracy = 0.9
  return config
