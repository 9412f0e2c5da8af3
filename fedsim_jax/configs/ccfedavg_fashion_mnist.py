"""CC-FedAvg (Table II setting): Fashion-MNIST, 100 clients with two classes each, MLP,
beta = 4 budget levels (p in {1, 1/2, 1/4, 1/8}) assigned to random clients, ad-hoc skipping,
20% participation, 200 local iterations per round, SGD 0.01, batch 32.

`--config=configs/ccfedavg_fashion_mnist.py:<algorithm>` with ccfedavg_strategy1 /
ccfedavg_strategy2 / ccfedavg_c / fedavg_dropout / fednova_budget selects the baselines on the
same setting; `:fedavg` is FedAvg (full). The server averages unweighted (Algorithm 1).
"""

from fedsim_jax.config import base_config


def get_config(algorithm: str = 'ccfedavg'):
  config = base_config()
  config.algorithm.name = algorithm
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.partition.name = 'two_classes'
  config.model.name = 'mlp'
  config.model.kwargs.hidden_sizes = (200, 200)
  config.client.learning_rate = 0.01
  config.client.batch_size = 32
  config.client.local_steps = 200
  config.run.num_rounds = 400
  config.run.eval_every = 20
  config.algorithm.kwargs.cohort_size = 20
  if algorithm == 'fedavg':  # FedAvg (full): every selected client trains
    config.algorithm.kwargs.weighting = 'uniform'
  else:
    config.algorithm.kwargs.budget_rule = 'beta'
    config.algorithm.kwargs.budget_beta = 4
    config.algorithm.kwargs.random_assignment = True
    config.algorithm.kwargs.budget_schedule = 'ad_hoc'
  return config
