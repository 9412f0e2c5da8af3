"""Experiment configuration: the default `ConfigDict` and its validation.

Config files in `configs/` start from `base_config()` and override fields; every field can be
overridden on the command line (`--config.client.learning_rate=0.1`). `validate` checks every
setting before any data is loaded and raises `ConfigError` with one line naming the setting and
its allowed values. Nothing is silently clamped.
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from fedsim_jax.client.local_update import CLIENT_OPTIMIZERS
from fedsim_jax.data.federated import SAMPLING_MODES
from fedsim_jax.executor import BACKENDS
from fedsim_jax.models import MODELS
from fedsim_jax.runtime.latency import SPEED_DISTRIBUTIONS
from fedsim_jax.strategy import ADAPTIVE_FORMS, ALGORITHMS, WEIGHTINGS

PARTITIONS = ('iid', 'dirichlet', 'shards')


class ConfigError(ValueError):
  """An invalid experiment setting; its message is one line naming the setting."""


def base_config() -> ml_collections.ConfigDict:
  """Defaults shared by all experiments (FedAvg, Fashion-MNIST, MLP, 100 clients)."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.algorithm = 'fedavg'

  c.data = ml_collections.ConfigDict()
  c.data.name = 'fashion_mnist'
  c.data.data_dir = config_dict.placeholder(str)   # default: $FEDSIM_DATA_DIR or ~/fedsim_data
  c.data.num_clients = 100
  c.data.partition = 'dirichlet'
  c.data.concentration = 0.5       # Dirichlet alpha
  c.data.min_client_size = 10      # Dirichlet: resample until every client has this many
  c.data.shards_per_client = 2     # shards partition (McMahan et al.)
  c.data.partition_seed = config_dict.placeholder(int)  # default: the run seed

  c.model = ml_collections.ConfigDict()
  c.model.name = 'mlp'
  c.model.hidden_sizes = (200, 200)  # MLP only

  c.client = ml_collections.ConfigDict()
  c.client.optimizer = 'sgd'
  c.client.learning_rate = 0.05
  c.client.momentum = 0.9          # 'momentum' optimizer only
  c.client.weight_decay = 0.0
  c.client.batch_size = 32
  c.client.local_steps = config_dict.FieldReference(20, field_type=int)  # or None with epochs
  c.client.local_epochs = config_dict.placeholder(float)
  c.client.sampling = 'shuffle'

  c.server = ml_collections.ConfigDict()
  c.server.learning_rate = 1.0
  c.server.momentum = 0.9          # fedavgm
  c.server.b1 = 0.9                # fedadam / fedyogi
  c.server.b2 = 0.99
  c.server.eps = 1e-3              # adaptivity tau of Reddi et al.
  c.server.adaptive_form = 'reddi'  # or 'optax' (bias-corrected optax.adam/yogi/adagrad)

  c.scheduler = ml_collections.ConfigDict()
  c.scheduler.cohort_size = 10
  c.scheduler.weighting = 'num_examples'

  c.latency = ml_collections.ConfigDict()
  c.latency.distribution = 'homogeneous'
  c.latency.mean = 1.0             # seconds per local step
  c.latency.spread = 0.3           # normal: std = spread * mean
  c.latency.jitter = 0.0           # per-task relative std of the step time
  c.latency.communication_time = 0.0

  c.executor = ml_collections.ConfigDict()
  c.executor.backend = 'vmap'
  c.executor.unroll = 1
  c.executor.bucket_bits = 3
  c.executor.deferred = True

  c.run = ml_collections.ConfigDict()
  c.run.num_rounds = 100           # server versions
  c.run.max_virtual_time = config_dict.placeholder(float)
  c.run.max_client_updates = config_dict.placeholder(int)
  c.run.eval_every = 5             # server versions between evaluations
  c.run.eval_batch_size = 1000
  c.run.target_accuracy = config_dict.placeholder(float)
  return c


def _choice(name: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f'{name}={value!r} is not allowed; allowed values: {sorted(allowed)}')


def _positive(name: str, value, *, integer: bool = False, allow_zero: bool = False,
              optional: bool = False) -> None:
  if value is None and optional:
    return
  kind = 'an integer' if integer else 'a number'
  bound = '>= 0' if allow_zero else '> 0'
  if (value is None or isinstance(value, bool)
      or not isinstance(value, int if integer else (int, float))
      or (value < 0 if allow_zero else value <= 0)):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: {kind} {bound}')


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks every setting that can be checked without data; raises `ConfigError`."""
  _choice('algorithm', config.algorithm, ALGORITHMS)
  _positive('seed', config.seed, integer=True, allow_zero=True)
  data = config.data
  _positive('data.num_clients', data.num_clients, integer=True)
  _choice('data.partition', data.partition, PARTITIONS)
  _positive('data.concentration', data.concentration)
  _positive('data.min_client_size', data.min_client_size, integer=True, allow_zero=True)
  _positive('data.shards_per_client', data.shards_per_client, integer=True)
  _positive('data.partition_seed', data.partition_seed, integer=True, allow_zero=True,
            optional=True)
  _choice('model.name', config.model.name, MODELS)
  client = config.client
  _choice('client.optimizer', client.optimizer, CLIENT_OPTIMIZERS)
  _positive('client.learning_rate', client.learning_rate)
  _positive('client.weight_decay', client.weight_decay, allow_zero=True)
  _positive('client.batch_size', client.batch_size, integer=True)
  _choice('client.sampling', client.sampling, SAMPLING_MODES)
  if (client.local_steps is None) == (client.local_epochs is None):
    raise ConfigError('client.local_steps / client.local_epochs: set exactly one of them '
                      '(the other to None)')
  _positive('client.local_steps', client.local_steps, integer=True, optional=True)
  _positive('client.local_epochs', client.local_epochs, optional=True)
  _positive('server.learning_rate', config.server.learning_rate)
  _positive('server.eps', config.server.eps)
  _choice('server.adaptive_form', config.server.adaptive_form, ADAPTIVE_FORMS)
  for name in ('momentum', 'b1', 'b2'):
    value = config.server[name]
    if not 0 <= value < 1:
      raise ConfigError(f'server.{name}={value!r} is invalid; allowed values: 0 <= x < 1')
  scheduler = config.scheduler
  _positive('scheduler.cohort_size', scheduler.cohort_size, integer=True)
  if scheduler.cohort_size > data.num_clients:
    raise ConfigError(f'scheduler.cohort_size={scheduler.cohort_size} is invalid; allowed '
                      f'values: 1..data.num_clients ({data.num_clients})')
  _choice('scheduler.weighting', scheduler.weighting, WEIGHTINGS)
  latency = config.latency
  _choice('latency.distribution', latency.distribution, SPEED_DISTRIBUTIONS)
  _positive('latency.mean', latency.mean)
  _positive('latency.spread', latency.spread, allow_zero=True)
  _positive('latency.jitter', latency.jitter, allow_zero=True)
  _positive('latency.communication_time', latency.communication_time, allow_zero=True)
  executor = config.executor
  _choice('executor.backend', executor.backend, BACKENDS)
  if not (executor.unroll is True or (isinstance(executor.unroll, int) and executor.unroll >= 1)):
    raise ConfigError(f'executor.unroll={executor.unroll!r} is invalid; allowed values: an '
                      'integer >= 1 or True')
  _positive('executor.bucket_bits', executor.bucket_bits, integer=True)
  run = config.run
  _positive('run.num_rounds', run.num_rounds, integer=True, optional=True)
  _positive('run.max_virtual_time', run.max_virtual_time, optional=True)
  _positive('run.max_client_updates', run.max_client_updates, integer=True, optional=True)
  if run.num_rounds is None and run.max_virtual_time is None and run.max_client_updates is None:
    raise ConfigError('run.num_rounds / run.max_virtual_time / run.max_client_updates: set at '
                      'least one limit')
  _positive('run.eval_every', run.eval_every, integer=True)
  _positive('run.eval_batch_size', run.eval_batch_size, integer=True)
  if run.target_accuracy is not None and not 0 < run.target_accuracy <= 1:
    raise ConfigError(f'run.target_accuracy={run.target_accuracy!r} is invalid; allowed '
                      'values: 0 < x <= 1')
