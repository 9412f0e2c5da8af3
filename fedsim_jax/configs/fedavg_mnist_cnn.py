"""FedAvg with the FedCompass MNIST CNN (Table 8): MNIST, 100 clients, 2 classes each (shards).

The CNN trains fastest on XLA:CPU with the loop backend driving one jitted step at a time
(`executor.step_loop='host'`, about 20x a scanned task here; docs/design-notes.md, "Backends").
"""

from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm.name = 'fedavg'
  config.data.name = 'mnist'
  config.data.num_clients = 100
  config.partition.name = 'shards'
  config.partition.kwargs.shards_per_client = 2
  config.model.name = 'mnist_cnn'
  config.client.optimizer = 'sgd'
  config.client.learning_rate = 0.05
  config.client.batch_size = 64
  config.client.local_steps = 10
  config.algorithm.kwargs.cohort_size = 10
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.mean = 0.15  # FedCompass Table 7: MNIST, batch 64
  config.latency.kwargs.jitter = 0.05
  config.executor.backend = 'loop'
  config.executor.step_loop = 'host'
  config.run.num_rounds = 50
  config.run.target_accuracy = 0.9
  return config
