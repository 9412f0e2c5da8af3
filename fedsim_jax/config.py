"""Experiment configuration: the default `ConfigDict` and its validation.

Config files in `configs/` start from `base_config()` and override fields; every field can be
overridden on the command line (`--config.client.learning_rate=0.1`). `validate` checks every
setting before any data is loaded and raises `ConfigError` with one line naming the setting and
its allowed values. Nothing is silently clamped.
"""

from __future__ import annotations

from typing import Any

import ml_collections
from ml_collections import config_dict

from fedsim_jax.client.local_update import CLIENT_OPTIMIZERS
from fedsim_jax.data.federated import SAMPLING_MODES
from fedsim_jax.executor.choice import BACKEND_SETTINGS, STEP_LOOP_SETTINGS
from fedsim_jax.models import MODELS
from fedsim_jax.runtime.latency.registry import AVAILABILITY_MODELS, LATENCY_MODELS
from fedsim_jax.strategy import (ADAPTIVE_FORMS, ALGORITHMS, NORMALIZATIONS, SERVER_OPTIMIZERS,
                                 STALENESS_FUNCTIONS, WEIGHTINGS)
from fedsim_jax.strategy.fedasync import FEDASYNC_FORMS
from fedsim_jax.strategy.fedcompass import CREATE_RULES, SPEED_ESTIMATORS

PARTITIONS = ('iid', 'dirichlet', 'shards', 'class', 'dual_dirichlet', 'gamma_mix', 'two_classes',
              'budget_skewed', 'natural')
BUDGET_SKEWS = ('none', 'high', 'moderate')


class ConfigError(ValueError):
  """An invalid experiment setting; its message is one line naming the setting."""


def base_config() -> ml_collections.ConfigDict:
  """Defaults shared by all experiments (FedAvg, Fashion-MNIST, MLP, 100 clients).

  Optional settings are None by default; a section's comment says which algorithms read it.
  """
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.algorithm = 'fedavg'

  c.data = ml_collections.ConfigDict()
  c.data.name = 'fashion_mnist'
  c.data.data_dir = config_dict.placeholder(str)   # default: $FEDSIM_DATA_DIR or ~/fedsim_data
  c.data.num_clients = 100
  c.data.partition = 'dirichlet'
  c.data.concentration = 0.5       # Dirichlet alpha
  c.data.min_client_size = 10      # Dirichlet: resample until every client has this many;
                                   # natural: drop clients with fewer examples
  c.data.shards_per_client = 2     # shards partition (McMahan et al.)
  # FedCompass class partition (Alg. 4) / dual Dirichlet (Alg. 5); None: the paper's per-m values
  c.data.classes_per_client = config_dict.placeholder(tuple)  # (n_min, n_max)
  c.data.alpha_1 = config_dict.placeholder(float)             # client sizes (paper: m)
  c.data.alpha_2 = config_dict.placeholder(float)             # class mix (paper: 0.5)
  c.data.gamma = 0.0               # CC-FedAvg gamma-mix: 0 totally non-IID ... 1 IID
  c.data.partition_seed = config_dict.placeholder(int)  # default: the run seed
  c.data.balance = False           # Dirichlet: FedMA/MOON self-balancing (full clients get 0)
  c.data.budget_skew = 'high'      # budget_skewed: CC-FedAvg Table II 'none', IV 'high', V 'moderate'
  c.data.skewed_fraction = 0.1     # budget_skewed 'moderate': share of skewed clients
  # Straggler-domain split (Hard et al. 2024, Sec. 4.1) applied after the partition: the
  # num_stragglers clients holding most straggler-class examples become stragglers; the other
  # clients lose those classes. None: no split / every holder is a straggler.
  c.data.straggler_classes = config_dict.placeholder(tuple)
  c.data.num_stragglers = config_dict.placeholder(int)
  c.data.lazy = False              # keep examples on the host; gather active clients per batch

  c.model = ml_collections.ConfigDict()
  c.model.name = 'mlp'
  c.model.hidden_sizes = (200, 200)  # MLP only
  c.model.norm = config_dict.placeholder(str)  # resnet18/20: batch|group; vgg11: none|batch|group

  c.client = ml_collections.ConfigDict()
  c.client.optimizer = 'sgd'
  c.client.learning_rate = 0.05
  c.client.momentum = 0.9          # 'momentum' optimizer only
  c.client.weight_decay = 0.0
  c.client.batch_size = 32
  c.client.local_steps = config_dict.FieldReference(20, field_type=int)  # or None
  c.client.local_epochs = config_dict.placeholder(float)
  c.client.sampling = 'shuffle'
  c.client.proximal_strength = 0.0         # FedProx / `+ L2 reg.` nu
  c.client.distillation_strength = 0.0     # `+ KD reg.` rho (teacher: the downloaded model)
  c.client.distillation_temperature = 1.0

  c.server = ml_collections.ConfigDict()
  c.server.learning_rate = 1.0
  c.server.optimizer = 'sgd'       # fedbuff's server optimizer (the fed* names imply theirs)
  c.server.momentum = 0.9          # fedavgm, momentum
  c.server.b1 = 0.9                # adam / yogi / adagrad
  c.server.b2 = 0.99
  c.server.eps = 1e-3              # adaptivity tau of Reddi et al.
  c.server.adaptive_form = 'reddi'  # or 'optax' (bias-corrected optax.adam/yogi/adagrad)
  c.server.alpha = 0.9             # fedasync, fedcompass: alpha of st(u) = alpha (u + 1)^-a
  c.server.fedasync_form = 'mixing'  # or 'delta' (FedCompass's FedAsync baseline)
  c.server.staleness = 'polynomial'  # fedasync, fedbuff: s(u); 'constant' for none
  c.server.staleness_a = 0.5
  c.server.staleness_b = 4.0       # hinge only
  c.server.normalization = 'count'  # fedbuff: divide the buffer's sum by K ('count'), ...
  c.server.ema_decay = config_dict.placeholder(float)  # evaluate an EMA of server weights

  c.scheduler = ml_collections.ConfigDict()
  c.scheduler.cohort_size = 10     # synchronous: B; fedat: clients per tier round
  c.scheduler.weighting = 'num_examples'
  c.scheduler.num_selected = config_dict.placeholder(int)   # over-selection B_t >= B
  c.scheduler.deadline = config_dict.placeholder(float)     # seconds per round
  c.scheduler.min_responses = 1    # with a deadline
  c.scheduler.time_limit = config_dict.placeholder(float)   # time-limited local computation
  # ... or the limit as this percentile of the population's one-epoch compute time (the
  # straggler paper uses 75), estimated from the latency model before the run.
  c.scheduler.time_limit_percentile = config_dict.placeholder(float)
  c.scheduler.limit_includes_overhead = True
  c.scheduler.concurrency = 10     # asynchronous: tasks in flight
  c.scheduler.buffer_size = 10     # fedbuff: K
  c.scheduler.max_staleness = config_dict.placeholder(int)
  c.scheduler.tier_ratio = 2.0     # fedat: v
  c.scheduler.q_min = 40           # fedcompass: local steps in [q_min, q_max]
  c.scheduler.q_max = 200
  c.scheduler.latest_time_factor = 1.2  # fedcompass: lambda
  c.scheduler.speed_estimator = 'last'  # fedcompass: or 'ema' (public code)
  c.scheduler.speed_momentum = 0.9
  c.scheduler.create_rule = 'paper'     # fedcompass: CREATEGROUP as printed, or 'code'

  c.scheduler.switch_round = 100   # ccfedavg_c: tau, Strategy 3 before it, Strategy 2 after
  c.scheduler.storage = 'client'   # ccfedavg: history on clients (Alg. 1) or 'server' (Alg. 2)

  # Compute budgets p_i (CC-FedAvg): read by ccfedavg*, fedavg_dropout and fednova_budget.
  c.budget = ml_collections.ConfigDict()
  c.budget.rule = 'beta'           # 'beta' (p_i = 2^-floor(beta i / N)), 'two_group', 'uniform'
  c.budget.beta = 4
  c.budget.r = 0.5                 # two_group: fraction of constrained clients
  c.budget.w = 2                   # two_group / uniform: constrained clients have p = 1/W
  c.budget.random_assignment = False  # assign the levels to random clients (cross-device)
  c.budget.schedule = 'ad_hoc'     # 'ad_hoc', 'round_robin', 'synchronised'
  c.budget.first_selection_trains = True
  c.budget.phase = 'zero'          # round_robin: 'zero' or 'random'

  c.latency = ml_collections.ConfigDict()
  c.latency.model = 'per_step'     # settings of the chosen model are in its section below
  c.latency.per_step = ml_collections.ConfigDict({
      'mean': 1.0, 'distribution': 'homogeneous', 'spread': 0.3, 'jitter': 0.0,
      'communication_time': 0.0, 'redraw_probability': 0.0})
  c.latency.lognormal = ml_collections.ConfigDict({'model': 'per_example'})
  c.latency.fedscale = ml_collections.ConfigDict({'bandwidth_scale': 1.0})
  c.latency.device_ratio = ml_collections.ConfigDict({
      'fastest_step_time': 0.1, 'ratio': 5.0, 'jitter': 0.0})
  c.latency.trace = ml_collections.ConfigDict({'trace': config_dict.placeholder(str)})

  c.availability = ml_collections.ConfigDict()
  c.availability.model = 'always'
  c.availability.periodic = ml_collections.ConfigDict({'online_fraction': 0.5,
                                                       'period': 86400.0})
  c.availability.trace = ml_collections.ConfigDict({'trace': config_dict.placeholder(str)})

  c.executor = ml_collections.ConfigDict()
  c.executor.backend = 'auto'      # 'vmap', 'loop', or by the measured rule (executor/choice.py)
  c.executor.unroll = 1
  c.executor.bucket_bits = 3
  c.executor.step_loop = 'auto'    # 'scan', 'host' (loop backend: one jitted step per local
                                   # step), or by the rule in executor/choice.py
  c.executor.deferred = True
  c.executor.devices = 1           # local devices the task axis is sharded over (vmap backend)

  c.run = ml_collections.ConfigDict()
  c.run.num_rounds = config_dict.FieldReference(100, field_type=int)  # server versions
  c.run.max_virtual_time = config_dict.placeholder(float)
  c.run.max_client_updates = config_dict.placeholder(int)
  c.run.eval_every = 5             # server versions between evaluations
  c.run.eval_batch_size = 1000
  c.run.target_accuracy = config_dict.placeholder(float)
  # Extra evaluation metrics (classification models): accuracy on named class subsets, e.g.
  # `c.run.eval_class_groups.straggler = (0, 1, 2, 3, 4)`, balanced accuracy, top-k accuracy.
  c.run.eval_class_groups = ml_collections.ConfigDict()
  c.run.eval_balanced_accuracy = False
  c.run.eval_top_k = ()
  return c


def fashion_mnist_config(algorithm: str) -> ml_collections.ConfigDict:
  """The setting the shipped Fashion-MNIST configs share: 100 clients with Dirichlet(0.5) label
  skew, the 784-200-200-10 MLP, client SGD at 0.05 with batch 32, target accuracy 80%."""
  config = base_config()
  config.algorithm = algorithm
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.data.partition = 'dirichlet'
  config.data.concentration = 0.5
  config.model.name = 'mlp'
  config.client.learning_rate = 0.05
  config.client.batch_size = 32
  config.run.target_accuracy = 0.8
  return config


# Scheduler settings that only some algorithms read (checked against the federation size only
# for those).
_SETTING_USERS = {
    'cohort_size': ('fedavg', 'fedavgm', 'fedadam', 'fedyogi', 'fedadagrad', 'fedat',
                    'ccfedavg', 'ccfedavg_c', 'ccfedavg_strategy1', 'ccfedavg_strategy2',
                    'fedavg_dropout', 'fednova_budget'),
    'concurrency': ('fedasync', 'fedbuff'),
}


def set_by_path(config: ml_collections.ConfigDict, path: str, value: Any) -> None:
  """Sets `config.<path>` (dotted, e.g. 'data.lazy') to `value`, even to a value of another
  type than the default (None placeholders included), like `--config.<path>=...` does."""
  *parents, leaf = path.split('.')
  node = config
  for part in parents:
    node = node[part]
  with node.unlocked():
    node[leaf] = value


def uses_setting(algorithm: str, setting: str) -> bool:
  return algorithm in _SETTING_USERS.get(setting, (algorithm,))


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
  if not 0 <= data.gamma <= 1:
    raise ConfigError(f'data.gamma={data.gamma!r} is invalid; allowed values: 0 <= x <= 1')
  _positive('data.partition_seed', data.partition_seed, integer=True, allow_zero=True,
            optional=True)
  _choice('data.budget_skew', data.budget_skew, BUDGET_SKEWS)
  if not 0 <= data.skewed_fraction <= 1:
    raise ConfigError(f'data.skewed_fraction={data.skewed_fraction!r} is invalid; allowed '
                      'values: 0 <= x <= 1')
  _positive('data.num_stragglers', data.num_stragglers, integer=True, optional=True)
  if data.num_stragglers is not None and data.straggler_classes is None:
    raise ConfigError('data.num_stragglers needs data.straggler_classes (a tuple of classes)')
  for k in config.run.eval_top_k:
    _positive('run.eval_top_k', k, integer=True)
  _choice('model.name', config.model.name, MODELS)
  client = config.client
  _choice('client.optimizer', client.optimizer, CLIENT_OPTIMIZERS)
  _positive('client.learning_rate', client.learning_rate)
  _positive('client.weight_decay', client.weight_decay, allow_zero=True)
  _positive('client.batch_size', client.batch_size, integer=True)
  _choice('client.sampling', client.sampling, SAMPLING_MODES)
  if client.local_steps is not None and client.local_epochs is not None:
    raise ConfigError('client.local_steps / client.local_epochs: set at most one of them '
                      '(the other to None)')
  time_limited = (config.scheduler.time_limit is not None
                  or config.scheduler.time_limit_percentile is not None)
  if config.algorithm.startswith('fedcompass'):
    if client.local_steps is not None or client.local_epochs is not None:
      raise ConfigError('client.local_steps / client.local_epochs: FedCompass chooses local '
                        'steps itself (scheduler.q_min..q_max); allowed values: None')
  elif client.local_steps is None and client.local_epochs is None and not time_limited:
    raise ConfigError('client.local_steps / client.local_epochs / scheduler.time_limit: set '
                      'one of them')
  _positive('client.local_steps', client.local_steps, integer=True, optional=True)
  _positive('client.local_epochs', client.local_epochs, optional=True)
  for name in ('proximal_strength', 'distillation_strength'):
    _positive(f'client.{name}', client[name], allow_zero=True)
  _positive('client.distillation_temperature', client.distillation_temperature)
  server = config.server
  _positive('server.learning_rate', server.learning_rate)
  _choice('server.optimizer', server.optimizer, SERVER_OPTIMIZERS)
  _positive('server.eps', server.eps)
  if not 0 < server.alpha <= 1:
    raise ConfigError(f'server.alpha={server.alpha!r} is invalid; allowed values: 0 < x <= 1')
  _choice('server.staleness', server.staleness, STALENESS_FUNCTIONS)
  _choice('server.fedasync_form', server.fedasync_form, FEDASYNC_FORMS)
  _positive('server.staleness_a', server.staleness_a, allow_zero=True)
  _positive('server.staleness_b', server.staleness_b, allow_zero=True)
  _choice('server.normalization', server.normalization, NORMALIZATIONS)
  if server.ema_decay is not None and not 0 <= server.ema_decay < 1:
    raise ConfigError(f'server.ema_decay={server.ema_decay!r} is invalid; allowed values: '
                      '0 <= x < 1 or None')
  _choice('server.adaptive_form', config.server.adaptive_form, ADAPTIVE_FORMS)
  for name in ('momentum', 'b1', 'b2'):
    value = config.server[name]
    if not 0 <= value < 1:
      raise ConfigError(f'server.{name}={value!r} is invalid; allowed values: 0 <= x < 1')
  scheduler = config.scheduler
  _positive('scheduler.cohort_size', scheduler.cohort_size, integer=True)
  if uses_setting(config.algorithm, 'cohort_size') and scheduler.cohort_size > data.num_clients:
    raise ConfigError(f'scheduler.cohort_size={scheduler.cohort_size} is invalid; allowed '
                      f'values: 1..data.num_clients ({data.num_clients})')
  _choice('scheduler.weighting', scheduler.weighting, WEIGHTINGS)
  _positive('scheduler.num_selected', scheduler.num_selected, integer=True, optional=True)
  if scheduler.num_selected is not None and not (
      scheduler.cohort_size <= scheduler.num_selected <= data.num_clients):
    raise ConfigError(f'scheduler.num_selected={scheduler.num_selected} is invalid; allowed '
                      f'values: cohort_size ({scheduler.cohort_size})..data.num_clients '
                      f'({data.num_clients})')
  _positive('scheduler.deadline', scheduler.deadline, optional=True)
  _positive('scheduler.min_responses', scheduler.min_responses, integer=True)
  if scheduler.min_responses > scheduler.cohort_size:
    raise ConfigError(f'scheduler.min_responses={scheduler.min_responses} is invalid; allowed '
                      f'values: 1..cohort_size ({scheduler.cohort_size})')
  _positive('scheduler.time_limit', scheduler.time_limit, optional=True)
  if scheduler.time_limit_percentile is not None:
    if scheduler.time_limit is not None:
      raise ConfigError('scheduler.time_limit / scheduler.time_limit_percentile: set at most one')
    if not 0 < scheduler.time_limit_percentile <= 100:
      raise ConfigError(f'scheduler.time_limit_percentile={scheduler.time_limit_percentile!r} '
                        'is invalid; allowed values: 0 < x <= 100')
  _positive('scheduler.concurrency', scheduler.concurrency, integer=True)
  if uses_setting(config.algorithm, 'concurrency') and scheduler.concurrency > data.num_clients:
    raise ConfigError(f'scheduler.concurrency={scheduler.concurrency} is invalid; allowed '
                      f'values: 1..data.num_clients ({data.num_clients})')
  _positive('scheduler.buffer_size', scheduler.buffer_size, integer=True)
  _positive('scheduler.max_staleness', scheduler.max_staleness, integer=True, allow_zero=True,
            optional=True)
  if not scheduler.tier_ratio >= 1:
    raise ConfigError(f'scheduler.tier_ratio={scheduler.tier_ratio!r} is invalid; allowed '
                      'values: a number >= 1')
  _positive('scheduler.q_min', scheduler.q_min, integer=True)
  _positive('scheduler.q_max', scheduler.q_max, integer=True)
  if scheduler.q_min > scheduler.q_max:
    raise ConfigError(f'scheduler.q_min={scheduler.q_min} is invalid; allowed values: '
                      f'1..scheduler.q_max ({scheduler.q_max})')
  if not scheduler.latest_time_factor >= 1:
    raise ConfigError(f'scheduler.latest_time_factor={scheduler.latest_time_factor!r} is '
                      'invalid; allowed values: a number >= 1')
  _choice('scheduler.speed_estimator', scheduler.speed_estimator, SPEED_ESTIMATORS)
  _choice('scheduler.create_rule', scheduler.create_rule, CREATE_RULES)
  _choice('scheduler.storage', scheduler.storage, ('client', 'server'))
  _positive('scheduler.switch_round', scheduler.switch_round, integer=True, allow_zero=True)
  budget = config.budget
  _choice('budget.rule', budget.rule, ('beta', 'two_group', 'uniform'))
  _positive('budget.beta', budget.beta, integer=True)
  _positive('budget.w', budget.w, integer=True)
  if not 0 <= budget.r <= 1:
    raise ConfigError(f'budget.r={budget.r!r} is invalid; allowed values: 0 <= r <= 1')
  _choice('budget.schedule', budget.schedule, ('ad_hoc', 'round_robin', 'synchronised'))
  _choice('budget.phase', budget.phase, ('zero', 'random'))
  if config.algorithm == 'fedavg_dropout' and config.run.num_rounds is None:
    raise ConfigError('run.num_rounds: fedavg_dropout needs it (a client trains for p_i x '
                      'num_rounds rounds); allowed values: an integer >= 1')
  _choice('latency.model', config.latency.model, LATENCY_MODELS)
  _choice('availability.model', config.availability.model, AVAILABILITY_MODELS)
  executor = config.executor
  _choice('executor.backend', executor.backend, BACKEND_SETTINGS)
  if not (executor.unroll is True or (isinstance(executor.unroll, int) and executor.unroll >= 1)):
    raise ConfigError(f'executor.unroll={executor.unroll!r} is invalid; allowed values: an '
                      'integer >= 1 or True')
  _positive('executor.bucket_bits', executor.bucket_bits, integer=True)
  _choice('executor.step_loop', executor.step_loop, STEP_LOOP_SETTINGS)
  if executor.step_loop == 'host' and executor.backend == 'vmap':
    raise ConfigError("executor.step_loop='host' is invalid with executor.backend="
                      f"{executor.backend!r}; allowed: step_loop 'host' with backend 'loop'")
  _positive('executor.devices', executor.devices, integer=True)
  if executor.devices > 1 and executor.backend == 'loop':
    raise ConfigError(f'executor.devices={executor.devices} is invalid with executor.backend='
                      f"{executor.backend!r}; allowed: devices > 1 with backend 'vmap'")
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
