"""Experiment configuration: the default `ConfigDict` and its validation.

Config files in `configs/` start from `base_config()` and override fields; every field can be
overridden on the command line (`--config.client.learning_rate=0.1`). `validate` checks every
setting before any data is loaded and raises `ConfigError` with one line naming the setting and
its allowed values. Nothing is silently clamped.
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections
from ml_collections import config_dict

from fedsim_jax.client.local_update import CLIENT_OPTIMIZERS
from fedsim_jax.data.federated import SAMPLING_MODES
from fedsim_jax.data.partition import BUDGET_SKEWS, PARTITIONS
from fedsim_jax.executor.choice import BACKEND_SETTINGS, STEP_LOOP_SETTINGS
from fedsim_jax.models import MODELS
from fedsim_jax.runtime.latency.registry import AVAILABILITY_MODELS, LATENCY_MODELS
from fedsim_jax.strategy import (
  ADAPTIVE_FORMS,
  ALGORITHMS,
  NORMALIZATIONS,
  SERVER_OPTIMIZERS,
  STALENESS_FUNCTIONS,
  WEIGHTINGS,
)
from fedsim_jax.strategy.asofed import DECAY_GRADIENTS, DELAY_MEASURES
from fedsim_jax.strategy.fare_dust import EMPTY_HISTORY_RULES
from fedsim_jax.strategy.feast_msg import WINDOW_CLOSE_RULES
from fedsim_jax.strategy.fedasmu import (
  FEDASMU_VARIANTS,
  GRADIENT_SIGNS,
  SIGMA_GRADIENTS,
  STATIC_ALPHAS,
  XI_FORMS,
  fetch_policy_name,
)
from fedsim_jax.strategy.fedasmu_fetch import (
  BASELINE_SCOPES,
  FETCH_POLICIES,
  HAZARD_PRIORS,
  META_EXPLOITS,
  META_FEATURES,
  Q_BOOTSTRAPS,
)
from fedsim_jax.strategy.fedasync import FEDASYNC_FORMS
from fedsim_jax.strategy.fedcompass import CREATE_RULES, SPEED_ESTIMATORS
from fedsim_jax.strategy.moon import REPRESENTATIONS
from fedsim_jax.strategy.periodic_trigger import TRIGGER_TIMINGS
from fedsim_jax.strategy.port import SIMILARITY_REFERENCES


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
  c.data.data_dir = config_dict.placeholder(str)  # default: $FEDSIM_DATA_DIR or ~/fedsim_data
  c.data.num_clients = 100
  c.data.partition = 'dirichlet'
  c.data.concentration = 0.5  # Dirichlet alpha
  c.data.min_client_size = 10  # Dirichlet: resample until every client has this many;
  # natural: drop clients with fewer examples
  c.data.shards_per_client = 2  # shards partition (McMahan et al.)
  # FedCompass class partition (Alg. 4) / dual Dirichlet (Alg. 5); None: the paper's per-m values
  c.data.classes_per_client = config_dict.placeholder(tuple)  # (n_min, n_max)
  c.data.alpha_1 = config_dict.placeholder(float)  # client sizes (paper: m)
  c.data.alpha_2 = config_dict.placeholder(float)  # class mix (paper: 0.5)
  c.data.gamma = 0.0  # CC-FedAvg gamma-mix: 0 totally non-IID ... 1 IID
  c.data.partition_seed = config_dict.placeholder(int)  # default: the run seed
  c.data.balance = False  # Dirichlet: FedMA/MOON self-balancing (full clients get 0)
  c.data.budget_skew = 'high'  # budget_skewed: CC-FedAvg Table II 'none', IV 'high', V 'moderate'
  c.data.skewed_fraction = 0.1  # budget_skewed 'moderate': share of skewed clients
  # Straggler-domain split (Hard et al. 2024, Sec. 4.1) applied after the partition: the
  # num_stragglers clients holding most straggler-class examples become stragglers; the other
  # clients lose those classes. None: no split / every holder is a straggler.
  c.data.straggler_classes = config_dict.placeholder(tuple)
  c.data.num_stragglers = config_dict.placeholder(int)
  c.data.lazy = False  # keep examples on the host; gather active clients per batch

  c.model = ml_collections.ConfigDict()
  c.model.name = 'mlp'
  c.model.hidden_sizes = (200, 200)  # MLP only
  c.model.norm = config_dict.placeholder(str)  # resnet18/20: batch|group; vgg11: none|batch|group

  c.client = ml_collections.ConfigDict()
  c.client.optimizer = 'sgd'
  c.client.learning_rate = 0.05
  c.client.momentum = 0.9  # 'momentum' optimizer only
  c.client.weight_decay = 0.0
  c.client.batch_size = 32
  c.client.local_steps = config_dict.FieldReference(20, field_type=int)  # or None
  c.client.local_epochs = config_dict.placeholder(float)
  c.client.sampling = 'shuffle'
  c.client.proximal_strength = 0.0  # FedProx / `+ L2 reg.` nu
  c.client.distillation_strength = 0.0  # `+ KD reg.` rho (teacher: the downloaded model)
  c.client.distillation_temperature = 1.0

  c.server = ml_collections.ConfigDict()
  c.server.learning_rate = 1.0
  c.server.optimizer = 'sgd'  # fedbuff's server optimizer (the fed* names imply theirs)
  c.server.momentum = 0.9  # fedavgm, momentum
  c.server.b1 = 0.9  # adam / yogi / adagrad
  c.server.b2 = 0.99
  c.server.eps = 1e-3  # adaptivity tau of Reddi et al.
  c.server.adaptive_form = 'reddi'  # or 'optax' (bias-corrected optax.adam/yogi/adagrad)
  c.server.alpha = 0.9  # fedasync, fedcompass: alpha of st(u) = alpha (u + 1)^-a
  c.server.fedasync_form = 'mixing'  # or 'delta' (FedCompass's FedAsync baseline)
  c.server.staleness = 'polynomial'  # fedasync, fedbuff: s(u); 'constant' for none
  c.server.staleness_a = 0.5
  c.server.staleness_b = 4.0  # hinge only
  # fedbuff: divide the buffer's sum_k p_k s_k delta_k by sum_k p_k ('weights': the weighted
  # mean; K under uniform weighting), by K ('count': needs uniform weighting) or by 1 ('sum',
  # FedCompass's FedBuff with example shares p_k = n_k / n); 'steps' is FedNova-style.
  c.server.normalization = 'weights'
  c.server.ema_decay = config_dict.placeholder(float)  # evaluate an EMA of server weights

  c.scheduler = ml_collections.ConfigDict()
  c.scheduler.cohort_size = 10  # synchronous: B; fedat: clients per tier round
  c.scheduler.weighting = 'num_examples'
  c.scheduler.num_selected = config_dict.placeholder(int)  # over-selection B_t >= B
  c.scheduler.deadline = config_dict.placeholder(float)  # seconds per round
  c.scheduler.min_responses = 1  # with a deadline
  c.scheduler.time_limit = config_dict.placeholder(float)  # time-limited local computation
  # ... or the limit as this percentile of the population's one-epoch compute time (the
  # straggler paper uses 75), estimated from the latency model before the run.
  c.scheduler.time_limit_percentile = config_dict.placeholder(float)
  c.scheduler.limit_includes_overhead = True
  c.scheduler.concurrency = 10  # asynchronous: tasks in flight
  c.scheduler.buffer_size = 10  # fedbuff: K
  c.scheduler.max_staleness = config_dict.placeholder(int)
  # FedASMU's periodic trigger (Alg. 1 lines 1-6, strategy/periodic_trigger.py): every
  # trigger_period seconds start up to trigger_count idle devices while fewer than `concurrency`
  # train. Read by the fedasmu algorithms (which need it) and, when set, by the other
  # asynchronous ones (fedasync, fedbuff, port, asofed, fedsa); None: refill slots at once.
  c.scheduler.trigger_period = config_dict.placeholder(float)  # calligraphic T (Table 5: 10)
  c.scheduler.trigger_count = 10  # m' (Table 5: 10; the appendix's reading: 1 every 5 s)
  c.scheduler.trigger_timing = 'periodic'  # or 'after_trigger' (Alg. 1's `Sleep` as printed)
  c.scheduler.tier_ratio = 2.0  # fedat: v
  c.scheduler.q_min = 40  # fedcompass: local steps in [q_min, q_max]
  c.scheduler.q_max = 200
  c.scheduler.latest_time_factor = 1.2  # fedcompass: lambda
  c.scheduler.speed_estimator = 'last'  # fedcompass: or 'ema' (public code)
  c.scheduler.speed_momentum = 0.9
  c.scheduler.create_rule = 'paper'  # fedcompass: CREATEGROUP as printed, or 'code'

  c.scheduler.switch_round = 100  # ccfedavg_c: tau, Strategy 3 before it, Strategy 2 after
  c.scheduler.storage = 'client'  # ccfedavg: history on clients (Alg. 1) or 'server' (Alg. 2)

  # Compute budgets p_i (CC-FedAvg): read by ccfedavg*, fedavg_dropout and fednova_budget.
  c.budget = ml_collections.ConfigDict()
  c.budget.rule = 'beta'  # 'beta' (p_i = 2^-floor(beta i / N)), 'two_group', 'uniform'
  c.budget.beta = 4
  c.budget.r = 0.5  # two_group: fraction of constrained clients
  c.budget.w = 2  # two_group / uniform: constrained clients have p = 1/W
  c.budget.random_assignment = False  # assign the levels to random clients (cross-device)
  c.budget.schedule = 'ad_hoc'  # 'ad_hoc', 'round_robin', 'synchronised'
  c.budget.first_selection_trains = True
  c.budget.phase = 'zero'  # round_robin: 'zero' or 'random'

  # FARe-DUST (Hard et al., "Learning from straggler clients", Sec. 2.2, Algorithms 1 and 3;
  # strategy/fare_dust.py). Defaults: the EMNIST values of Tables 16 and 17 (identical); the
  # server optimizer's other settings (learning rate eta_g, b1, b2, eps) are in `server`.
  c.fare_dust = ml_collections.ConfigDict()
  c.fare_dust.history_length = 50  # k, rounds of summed deltas kept (Tables 16-17: 50/50/100)
  c.fare_dust.rho = 0.1  # rho, distillation strength (Tables 16-17: 0.1/0.1/0.0005)
  c.fare_dust.temperature = 1.0  # T of the distillation loss (not stated in the paper)
  c.fare_dust.ema_decay = 0.99  # beta of the evaluated EMA (Tables 16-17: 0.99/0.9/0.99)
  # eta_g of Alg. 1 line 7 (w_teacher = w_t - eta_g Delta_t' / b_t'); None: server.learning_rate
  c.fare_dust.teacher_learning_rate = config_dict.placeholder(float)
  c.fare_dust.empty_history = 'no_distillation'  # before any delta is kept; or 'latest_model'
  c.fare_dust.server_optimizer = 'adam'  # "in conjunction with the FedAdam server optimizer" (G.3)

  # FeAST-on-MSG (Sec. 2.3, Algorithm 2; strategy/feast_msg.py). The global model's FedAvg
  # server learning rate eta_g is server.learning_rate (Table 18: 0.006/0.2/0.01). Defaults: the
  # EMNIST `per-example` values of Table 18 (Table 19, `per-domain`: beta 0.99, kappa 0.9).
  c.feast = ml_collections.ConfigDict()
  c.feast.tau_max = 100000.0  # tau_max, seconds a round's stragglers may join (App. G.4)
  c.feast.ema_decay = 0.95  # beta of a, Eq. (2) (Table 18: 0.95/0.995/0.995)
  c.feast.kappa = 0.0  # eta_a / eta_g (Table 18: 0/0.5/0; Table 19: 0.9/0.5/0.2)
  c.feast.window_close = 'complete'  # at tau_max or once all stragglers are in; or 'tau_max'

  c.latency = ml_collections.ConfigDict()
  c.latency.model = 'per_step'  # settings of the chosen model are in its section below
  c.latency.per_step = ml_collections.ConfigDict(
    {
      'mean': 1.0,
      'distribution': 'homogeneous',
      'spread': 0.3,
      'jitter': 0.0,
      'communication_time': 0.0,
      'redraw_probability': 0.0,
    }
  )
  c.latency.lognormal = ml_collections.ConfigDict({'model': 'per_example'})
  c.latency.fedscale = ml_collections.ConfigDict({'bandwidth_scale': 1.0})
  c.latency.device_ratio = ml_collections.ConfigDict(
    {'fastest_step_time': 0.1, 'ratio': 5.0, 'jitter': 0.0}
  )
  c.latency.trace = ml_collections.ConfigDict({'trace': config_dict.placeholder(str)})

  c.availability = ml_collections.ConfigDict()
  c.availability.model = 'always'
  c.availability.periodic = ml_collections.ConfigDict({'online_fraction': 0.5, 'period': 86400.0})
  c.availability.trace = ml_collections.ConfigDict({'trace': config_dict.placeholder(str)})

  c.executor = ml_collections.ConfigDict()
  c.executor.backend = 'auto'  # 'vmap', 'loop', or by the measured rule (executor/choice.py)
  c.executor.unroll = 1
  c.executor.bucket_bits = 3
  c.executor.step_loop = 'auto'  # 'scan', 'host' (loop backend: one jitted step per local
  # step), or by the rule in executor/choice.py
  c.executor.deferred = True
  c.executor.devices = 1  # local devices the task axis is sharded over (vmap backend)
  c.executor.threads = 0  # loop backend: tasks run at once, each from its own host
  # thread; 0 = one per CPU core on CPU, 1 on accelerators

  c.run = ml_collections.ConfigDict()
  c.run.num_rounds = config_dict.FieldReference(100, field_type=int)  # server versions
  c.run.max_virtual_time = config_dict.placeholder(float)
  c.run.max_client_updates = config_dict.placeholder(int)
  c.run.eval_every = 5  # server versions between evaluations
  c.run.eval_batch_size = 1000
  c.run.target_accuracy = config_dict.placeholder(float)
  # Extra evaluation metrics (classification models): accuracy on named class subsets, e.g.
  # `c.run.eval_class_groups.straggler = (0, 1, 2, 3, 4)`, balanced accuracy, top-k accuracy.
  c.run.eval_class_groups = ml_collections.ConfigDict()
  c.run.eval_balanced_accuracy = False
  c.run.eval_top_k = ()
  # Reuse of compiled programs (fedsim_jax/compilation_cache.py): 'process' shares them between
  # the runs of this process, 'off', or a directory that keeps them across processes.
  c.run.compilation_cache = 'process'

  # FedASMU's fresh-model fetch timing (Liu et al., Sec. 4, Formulas 5-6, Alg. 2); read by the
  # fedasmu algorithms. Only eta_RL is stated in the paper; see strategy/fedasmu_fetch.py.
  c.fedasmu_fetch = ml_collections.ConfigDict()
  c.fedasmu_fetch.policy = 'learned'  # meta LSTM + Q-tables; 'h1'/'h2'/'h3' fixed (ablation);
  # 'none': no fetch (FedASMU-FA)
  c.fedasmu_fetch.hidden_size = 35  # meta model theta: LSTM width
  c.fedasmu_fetch.features = ('progress', 'remaining', 'length')  # theta's inputs at epoch l
  c.fedasmu_fetch.hazard_prior = 'uniform'  # untrained theta proposes slots uniformly, or 'none'
  c.fedasmu_fetch.pretrain_history = config_dict.placeholder(str)  # theta's "historical data"
  c.fedasmu_fetch.pretrain_passes = 1
  c.fedasmu_fetch.learning_rate = 0.001  # eta_RL (Formula 5, Tables 5-6)
  c.fedasmu_fetch.baseline_decay = 0.05  # rho: b <- (1 - rho) b + rho R (Alg. 2 line 13)
  c.fedasmu_fetch.baseline_init = 0.0  # b_0
  c.fedasmu_fetch.baseline_scope = 'all'  # rewards moving b: 'all' or 'meta' (theta's only)
  c.fedasmu_fetch.epsilon = 0.1  # epsilon of the epsilon-greedy selection
  c.fedasmu_fetch.meta_exploit = 'sample'  # theta's greedy branch: 'sample' or 'mode'
  c.fedasmu_fetch.q_learning_rate = 0.1  # phi (Formula 6)
  c.fedasmu_fetch.q_discount = 0.9  # psi (Formula 6)
  c.fedasmu_fetch.q_bootstrap = 'same'  # max_a H(l*, a) in the same state (as printed) / 'next'

  # FedASMU (Liu et al. 2024, Alg. 1-2, Formulas 1-3 and 7-9; strategy/fedasmu.py), read by
  # fedasmu, fedasmu_da, fedasmu_fa, fedasmu_0, fedasmu_h1..h3. Defaults: Table 5's LeNet/FMNIST
  # values where the paper states them; the system model every asynchronous method shares is
  # in `scheduler` (trigger period and m': scheduler.trigger_*, the cap of 10 devices:
  # scheduler.concurrency), T = 500 rounds is run.num_rounds, eta_i client.learning_rate. The
  # rest are choices documented in strategy/fedasmu.py.
  c.fedasmu = ml_collections.ConfigDict()
  c.fedasmu.tau = 99  # tau: discard uploads with staleness t - o + 1 > tau
  c.fedasmu.lambda_learning_rate = 1e-4  # eta_lambda (Formula 3)
  c.fedasmu.sigma_learning_rate = 1e-4  # eta_sigma
  c.fedasmu.iota_learning_rate = 1e-4  # eta_iota
  c.fedasmu.gamma_learning_rate = 1e-4  # eta_gamma (Formula 9)
  c.fedasmu.v_learning_rate = 1e-4  # eta_v
  c.fedasmu.mu_alpha = 1.0  # mu_alpha (Formula 2; not stated)
  c.fedasmu.lambda_0 = 1.0  # lambda_0, sigma_0, iota_0: initial control parameters
  c.fedasmu.sigma_0 = 0.5  #   (Alg. 1 inputs; not stated)
  c.fedasmu.iota_0 = 0.1
  c.fedasmu.mu_beta = 1.0  # mu_beta (Formula 8; not stated)
  c.fedasmu.gamma_0 = 1.0  # gamma_0, v_0: initial device control parameters
  c.fedasmu.v_0 = 1.0  #   (not stated)
  c.fedasmu.alpha_min = 0.001  # alpha is projected onto [alpha_min, 1)
  c.fedasmu.min_version = 1.0  # Formula 2 uses sqrt(max(t, min_version)) (t = 0 at first)
  c.fedasmu.xi_form = 'appendix'  # lambda / (sqrt(t) s^sigma) + iota, or 'printed'
  c.fedasmu.sigma_gradient = 'exact'  # chain rule of xi_form, or 'printed' (appendix's ln sigma)
  c.fedasmu.gradient_sign = 'printed'  # g ~ (w' - w_o) / (eta L) as printed, or 'descent'
  c.fedasmu.sigma_min = 0.001  # sigma >= sigma_min with the printed xi_form/sigma_gradient
  c.fedasmu.static_alpha = 'fedasync'  # fedasmu_da/_0: server.alpha s(t - o), or 'frozen'

  # FedASMU's baselines (each module's docstring gives its source and choices). FedProx's mu is
  # client.proximal_strength; FedSA's M and tau_0 are scheduler.buffer_size and
  # scheduler.max_staleness, its s(tau) server.staleness / server.staleness_a.
  # MOON (Li, He and Song 2021, Algorithm 1; strategy/moon.py).
  c.moon = ml_collections.ConfigDict()
  c.moon.mu = 1.0  # mu, weight of l_con (paper: 5 CIFAR-10, 1 CIFAR-100)
  c.moon.temperature = 0.5  # tau (paper: 0.5)
  c.moon.representation = 'penultimate'  # z: input of the output layer (no projection head)
  # FedDyn (Acar et al. 2021, Algorithm 1; strategy/feddyn.py).
  c.feddyn = ml_collections.ConfigDict()
  c.feddyn.alpha = 0.01  # alpha (the paper tunes over {0.1, 0.01, 0.001})
  # PORT (Su and Li 2022; PLATO's port_server.py; strategy/port.py).
  c.port = ml_collections.ConfigDict()
  c.port.similarity_weight = 1.0  # weight of (cos + 1) / 2
  c.port.staleness_weight = 1.0  # weight of B / (tau + B)
  c.port.staleness_bound = 10.0  # B
  c.port.similarity_reference = 'last_update'  # w_t - w_{t-1} (PLATO) or 'since_download'
  c.port.similarity_min_staleness = 2  # below it cos := 1 (PLATO: staleness > 1)
  # ASO-Fed (Chen et al. 2020, Algorithms 1-2; strategy/asofed.py).
  c.asofed = ml_collections.ConfigDict()
  c.asofed.proximal = 0.01  # lambda, local constraint (lambda / 2)||w - w^t||^2
  c.asofed.decay = 0.5  # beta, decay coefficient of the gradient average h
  c.asofed.decay_gradient = 'current'  # gradient entering h: 'current' or 'previous'
  c.asofed.dynamic_step_size = True  # r_k = max(1, log(mean delay)); False: r_k = 1
  c.asofed.delay_measure = 'training_time'  # delay in virtual seconds, or 'staleness'
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


FEDASMU_READINGS = ('tables', 'appendix')


def fedasmu_fashion_mnist_config(
  algorithm: str, reading: str = 'tables'
) -> ml_collections.ConfigDict:
  """FedASMU's LeNet/Fashion-MNIST setting (Liu et al. 2024, Sec. 5, Table 5, appendix
  "Experiment details"), shared by the fedasmu* configs and usable by their baselines.

  Stated: 100 devices, Dirichlet label skew, LeNet-5, eta_i = 0.005, T = 500 rounds, tau = 99,
  slowest device 5x slower than the fastest (device speeds drawn uniformly, `device_ratio`), at
  most 10% of the devices training, target accuracy 0.70 (Table 2). Not stated, chosen here:
  Dirichlet concentration 0.5, batch 32, 5 local epochs, 0.1 s per local step on the fastest
  device, 1 s of download + upload per task. `reading` is the trigger (`scheduler.trigger_*`):
  'tables' (Tables 5-6: up to m' = 10 devices every 10 s) or 'appendix' ("one idle task every
  5 seconds").
  """
  if reading not in FEDASMU_READINGS:
    raise ConfigError(
      f'reading={reading!r} is not allowed; allowed values: {list(FEDASMU_READINGS)}'
    )
  config = fashion_mnist_config(algorithm)
  config.model.name = 'lenet5'
  config.client.learning_rate = 0.005  # eta_i (Table 5, LeNet FMNIST)
  config.client.local_steps = None
  config.client.local_epochs = 5.0  # L^i
  config.server.alpha = 0.6  # static FedAsync rule of fedasmu_da / fedasmu_0
  config.scheduler.concurrency = 10  # "10% of the total device number"
  config.latency.model = 'device_ratio'
  config.latency.device_ratio.ratio = 5.0
  config.latency.device_ratio.fastest_step_time = 0.1
  config.latency.device_ratio.communication_time = 1.0
  config.scheduler.trigger_period = 5.0 if reading == 'appendix' else 10.0  # calligraphic T
  config.scheduler.trigger_count = 1 if reading == 'appendix' else 10  # m'
  config.run.num_rounds = 500  # T (Table 5)
  config.run.eval_every = 10
  config.run.target_accuracy = 0.7
  return config


# Scheduler settings that only some algorithms read (checked against the federation size only
# for those).
_SETTING_USERS = {
  'cohort_size': (
    'fedavg',
    'fedavgm',
    'fedadam',
    'fedyogi',
    'fedadagrad',
    'fedat',
    'ccfedavg',
    'ccfedavg_c',
    'ccfedavg_strategy1',
    'ccfedavg_strategy2',
    'fedavg_dropout',
    'fednova_budget',
    'fare_dust',
    'feast_msg',
    'fedprox',
    'moon',
    'feddyn',
  ),
  'concurrency': ('fedasync', 'fedbuff', 'port', 'asofed', 'fedsa', *FEDASMU_VARIANTS),
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


def _positive(
  name: str, value, *, integer: bool = False, allow_zero: bool = False, optional: bool = False
) -> None:
  if value is None and optional:
    return
  kind = 'an integer' if integer else 'a number'
  bound = '>= 0' if allow_zero else '> 0'
  if (
    value is None
    or isinstance(value, bool)
    or not isinstance(value, int if integer else (int, float))
    or (value < 0 if allow_zero else value <= 0)
  ):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: {kind} {bound}')


def _unit_interval(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: 0 <= x < 1')


def _validate_straggler_algorithms(config: ml_collections.ConfigDict) -> None:
  """`fare_dust` and `feast` sections, and the settings those algorithms replace."""
  fare_dust = config.fare_dust
  _positive('fare_dust.history_length', fare_dust.history_length, integer=True)
  _positive('fare_dust.rho', fare_dust.rho, allow_zero=True)
  _positive('fare_dust.temperature', fare_dust.temperature)
  _unit_interval('fare_dust.ema_decay', fare_dust.ema_decay)
  _positive('fare_dust.teacher_learning_rate', fare_dust.teacher_learning_rate, optional=True)
  _choice('fare_dust.empty_history', fare_dust.empty_history, EMPTY_HISTORY_RULES)
  _choice('fare_dust.server_optimizer', fare_dust.server_optimizer, SERVER_OPTIMIZERS)
  feast = config.feast
  _positive('feast.tau_max', feast.tau_max, allow_zero=True)
  if feast.tau_max == float('inf'):
    raise ConfigError('feast.tau_max=inf is invalid; allowed values: a finite number >= 0')
  _choice('feast.window_close', feast.window_close, WINDOW_CLOSE_RULES)
  _unit_interval('feast.ema_decay', feast.ema_decay)
  _positive('feast.kappa', feast.kappa, allow_zero=True)
  section = {'fare_dust': 'fare_dust', 'feast_msg': 'feast'}.get(config.algorithm)
  if section is None:
    return
  if config.server.ema_decay is not None:
    raise ConfigError(
      f'server.ema_decay={config.server.ema_decay!r} is invalid with algorithm='
      f'{config.algorithm!r} (it has {section}.ema_decay); allowed values: None'
    )
  if config.scheduler.deadline is not None:
    raise ConfigError(
      f'scheduler.deadline={config.scheduler.deadline!r} is invalid with '
      f'algorithm={config.algorithm!r}; allowed values: None'
    )
  if config.algorithm == 'fare_dust' and config.client.distillation_strength != 0:
    raise ConfigError(
      f'client.distillation_strength={config.client.distillation_strength!r} is '
      "invalid with algorithm='fare_dust' (fare_dust.rho sets it); allowed "
      'values: 0'
    )


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
  _positive(
    'data.partition_seed', data.partition_seed, integer=True, allow_zero=True, optional=True
  )
  _choice('data.budget_skew', data.budget_skew, BUDGET_SKEWS)
  if not 0 <= data.skewed_fraction <= 1:
    raise ConfigError(
      f'data.skewed_fraction={data.skewed_fraction!r} is invalid; allowed values: 0 <= x <= 1'
    )
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
    raise ConfigError(
      'client.local_steps / client.local_epochs: set at most one of them (the other to None)'
    )
  time_limited = (
    config.scheduler.time_limit is not None or config.scheduler.time_limit_percentile is not None
  )
  if config.algorithm.startswith('fedcompass'):
    if client.local_steps is not None or client.local_epochs is not None:
      raise ConfigError(
        'client.local_steps / client.local_epochs: FedCompass chooses local '
        'steps itself (scheduler.q_min..q_max); allowed values: None'
      )
  elif client.local_steps is None and client.local_epochs is None and not time_limited:
    raise ConfigError(
      'client.local_steps / client.local_epochs / scheduler.time_limit: set one of them'
    )
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
    raise ConfigError(
      f'server.ema_decay={server.ema_decay!r} is invalid; allowed values: 0 <= x < 1 or None'
    )
  _choice('server.adaptive_form', config.server.adaptive_form, ADAPTIVE_FORMS)
  for name in ('momentum', 'b1', 'b2'):
    value = config.server[name]
    if not 0 <= value < 1:
      raise ConfigError(f'server.{name}={value!r} is invalid; allowed values: 0 <= x < 1')
  scheduler = config.scheduler
  _positive('scheduler.cohort_size', scheduler.cohort_size, integer=True)
  if uses_setting(config.algorithm, 'cohort_size') and scheduler.cohort_size > data.num_clients:
    raise ConfigError(
      f'scheduler.cohort_size={scheduler.cohort_size} is invalid; allowed '
      f'values: 1..data.num_clients ({data.num_clients})'
    )
  _choice('scheduler.weighting', scheduler.weighting, WEIGHTINGS)
  if (
    config.algorithm == 'fedbuff'
    and server.normalization == 'count'
    and scheduler.weighting == 'num_examples'
  ):
    # 'count' divides sum_k p_k delta_k by K; with example shares p_k = n_k / n that shrinks
    # every server step by about 1 / num_clients.
    raise ConfigError(
      "server.normalization='count' (FedBuff's mean over K) needs "
      "scheduler.weighting='uniform'; allowed with weighting='num_examples': "
      "server.normalization='weights' (example-weighted mean) or 'sum'"
    )
  _positive('scheduler.num_selected', scheduler.num_selected, integer=True, optional=True)
  if scheduler.num_selected is not None and not (
    scheduler.cohort_size <= scheduler.num_selected <= data.num_clients
  ):
    raise ConfigError(
      f'scheduler.num_selected={scheduler.num_selected} is invalid; allowed '
      f'values: cohort_size ({scheduler.cohort_size})..data.num_clients '
      f'({data.num_clients})'
    )
  _positive('scheduler.deadline', scheduler.deadline, optional=True)
  _positive('scheduler.min_responses', scheduler.min_responses, integer=True)
  if scheduler.min_responses > scheduler.cohort_size:
    raise ConfigError(
      f'scheduler.min_responses={scheduler.min_responses} is invalid; allowed '
      f'values: 1..cohort_size ({scheduler.cohort_size})'
    )
  _positive('scheduler.time_limit', scheduler.time_limit, optional=True)
  if scheduler.time_limit_percentile is not None:
    if scheduler.time_limit is not None:
      raise ConfigError('scheduler.time_limit / scheduler.time_limit_percentile: set at most one')
    if not 0 < scheduler.time_limit_percentile <= 100:
      raise ConfigError(
        f'scheduler.time_limit_percentile={scheduler.time_limit_percentile!r} '
        'is invalid; allowed values: 0 < x <= 100'
      )
  _positive('scheduler.concurrency', scheduler.concurrency, integer=True)
  if uses_setting(config.algorithm, 'concurrency') and scheduler.concurrency > data.num_clients:
    raise ConfigError(
      f'scheduler.concurrency={scheduler.concurrency} is invalid; allowed '
      f'values: 1..data.num_clients ({data.num_clients})'
    )
  _positive('scheduler.buffer_size', scheduler.buffer_size, integer=True)
  _positive(
    'scheduler.max_staleness', scheduler.max_staleness, integer=True, allow_zero=True, optional=True
  )
  _positive('scheduler.trigger_period', scheduler.trigger_period, optional=True)
  _positive('scheduler.trigger_count', scheduler.trigger_count, integer=True)
  _choice('scheduler.trigger_timing', scheduler.trigger_timing, TRIGGER_TIMINGS)
  if not scheduler.tier_ratio >= 1:
    raise ConfigError(
      f'scheduler.tier_ratio={scheduler.tier_ratio!r} is invalid; allowed values: a number >= 1'
    )
  _positive('scheduler.q_min', scheduler.q_min, integer=True)
  _positive('scheduler.q_max', scheduler.q_max, integer=True)
  if scheduler.q_min > scheduler.q_max:
    raise ConfigError(
      f'scheduler.q_min={scheduler.q_min} is invalid; allowed values: '
      f'1..scheduler.q_max ({scheduler.q_max})'
    )
  if not scheduler.latest_time_factor >= 1:
    raise ConfigError(
      f'scheduler.latest_time_factor={scheduler.latest_time_factor!r} is '
      'invalid; allowed values: a number >= 1'
    )
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
    raise ConfigError(
      'run.num_rounds: fedavg_dropout needs it (a client trains for p_i x '
      'num_rounds rounds); allowed values: an integer >= 1'
    )
  _validate_straggler_algorithms(config)
  _choice('latency.model', config.latency.model, LATENCY_MODELS)
  _choice('availability.model', config.availability.model, AVAILABILITY_MODELS)
  executor = config.executor
  _choice('executor.backend', executor.backend, BACKEND_SETTINGS)
  if not (executor.unroll is True or (isinstance(executor.unroll, int) and executor.unroll >= 1)):
    raise ConfigError(
      f'executor.unroll={executor.unroll!r} is invalid; allowed values: an integer >= 1 or True'
    )
  _positive('executor.bucket_bits', executor.bucket_bits, integer=True)
  _choice('executor.step_loop', executor.step_loop, STEP_LOOP_SETTINGS)
  if executor.step_loop == 'host' and executor.backend == 'vmap':
    raise ConfigError(
      "executor.step_loop='host' is invalid with executor.backend="
      f"{executor.backend!r}; allowed: step_loop 'host' with backend 'loop'"
    )
  _positive('executor.devices', executor.devices, integer=True)
  _positive('executor.threads', executor.threads, integer=True, allow_zero=True)  # 0 = auto
  if executor.threads > 1 and executor.backend == 'vmap':
    raise ConfigError(
      f'executor.threads={executor.threads} is invalid with executor.backend='
      "'vmap'; allowed: threads > 1 with backend 'loop' or 'auto'"
    )
  if executor.devices > 1 and executor.backend == 'loop':
    raise ConfigError(
      f'executor.devices={executor.devices} is invalid with executor.backend='
      f"{executor.backend!r}; allowed: devices > 1 with backend 'vmap'"
    )
  run = config.run
  _positive('run.num_rounds', run.num_rounds, integer=True, optional=True)
  _positive('run.max_virtual_time', run.max_virtual_time, optional=True)
  _positive('run.max_client_updates', run.max_client_updates, integer=True, optional=True)
  if run.num_rounds is None and run.max_virtual_time is None and run.max_client_updates is None:
    raise ConfigError(
      'run.num_rounds / run.max_virtual_time / run.max_client_updates: set at least one limit'
    )
  _positive('run.eval_every', run.eval_every, integer=True)
  _positive('run.eval_batch_size', run.eval_batch_size, integer=True)
  if run.target_accuracy is not None and not 0 < run.target_accuracy <= 1:
    raise ConfigError(
      f'run.target_accuracy={run.target_accuracy!r} is invalid; allowed values: 0 < x <= 1'
    )
  if not isinstance(run.compilation_cache, str) or not run.compilation_cache.strip():
    raise ConfigError(
      f'run.compilation_cache={run.compilation_cache!r} is invalid; allowed '
      "values: 'process', 'off' or a directory path"
    )
  _validate_fedasmu_fetch(config.fedasmu_fetch)
  _validate_fedasmu_baselines(config)
  _validate_fedasmu(config)


def _finite(name: str, value, *, minimum: float | None = None) -> None:
  if (
    isinstance(value, bool)
    or not isinstance(value, (int, float))
    or not math.isfinite(value)
    or (minimum is not None and value < minimum)
  ):
    bound = '' if minimum is None else f' >= {minimum}'
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: a finite number{bound}')


def _validate_fedasmu(config: ml_collections.ConfigDict) -> None:
  """The `fedasmu` section, and the settings the fedasmu algorithms replace or constrain."""
  f = config.fedasmu
  _positive('fedasmu.tau', f.tau, integer=True)
  for name in ('lambda', 'sigma', 'iota', 'gamma', 'v'):
    _positive(f'fedasmu.{name}_learning_rate', f[f'{name}_learning_rate'], allow_zero=True)
  for name in ('mu_alpha', 'mu_beta', 'min_version', 'sigma_min'):
    _positive(f'fedasmu.{name}', f[name])
  for name in ('lambda_0', 'iota_0', 'gamma_0'):
    _positive(f'fedasmu.{name}', f[name], allow_zero=True)
  if f.lambda_0 + f.iota_0 <= 0:
    raise ConfigError(
      f'fedasmu.lambda_0={f.lambda_0!r} / fedasmu.iota_0={f.iota_0!r} are '
      'invalid; allowed values: numbers >= 0 with lambda_0 + iota_0 > 0'
    )
  _choice('fedasmu.xi_form', f.xi_form, XI_FORMS)
  _choice('fedasmu.sigma_gradient', f.sigma_gradient, SIGMA_GRADIENTS)
  _choice('fedasmu.gradient_sign', f.gradient_sign, GRADIENT_SIGNS)
  _choice('fedasmu.static_alpha', f.static_alpha, STATIC_ALPHAS)
  if f.sigma_gradient == 'printed' and f.xi_form != 'appendix':
    raise ConfigError(
      "fedasmu.sigma_gradient='printed' is invalid with fedasmu.xi_form="
      f"{f.xi_form!r}; allowed values: 'exact' (or xi_form='appendix')"
    )
  printed = f.xi_form == 'printed' or f.sigma_gradient == 'printed'
  _finite('fedasmu.sigma_0', f.sigma_0, minimum=f.sigma_min if printed else None)
  _finite('fedasmu.v_0', f.v_0)
  if not 0 < f.alpha_min < 1:
    raise ConfigError(f'fedasmu.alpha_min={f.alpha_min!r} is invalid; allowed values: 0 < x < 1')
  if config.algorithm not in FEDASMU_VARIANTS:
    return
  scheduler, client = config.scheduler, config.client
  if scheduler.trigger_period is None:
    raise ConfigError(
      f'scheduler.trigger_period=None is invalid with algorithm='
      f'{config.algorithm!r} (Alg. 1 triggers devices periodically; Table 5: '
      '10); allowed values: a number > 0'
    )
  if scheduler.max_staleness is not None:
    raise ConfigError(
      f'scheduler.max_staleness={scheduler.max_staleness!r} is invalid with '
      f'algorithm={config.algorithm!r} (it reads fedasmu.tau); allowed values: '
      'None'
    )
  if fetch_policy_name(config.algorithm, config.fedasmu_fetch.policy) == 'none':
    return
  # With a fetch: Formula 4's plain SGD, split at a local epoch.
  if client.optimizer != 'sgd':
    raise ConfigError(
      f'client.optimizer={client.optimizer!r} is invalid with algorithm='
      f'{config.algorithm!r} (local training is split at the fetch and an '
      "optimizer state would restart); allowed values: 'sgd'"
    )
  for name in ('proximal_strength', 'distillation_strength'):
    if client[name] != 0:
      raise ConfigError(
        f'client.{name}={client[name]!r} is invalid with algorithm='
        f'{config.algorithm!r} (devices train Formula 4); allowed values: 0'
      )
  if scheduler.time_limit is not None or scheduler.time_limit_percentile is not None:
    raise ConfigError(
      f'scheduler.time_limit is invalid with algorithm={config.algorithm!r} '
      '(the fetch follows a local epoch); allowed values: None'
    )
  if client.local_steps is not None and client.local_steps < 2:
    raise ConfigError(
      f'client.local_steps={client.local_steps!r} is invalid with algorithm='
      f'{config.algorithm!r} (the fetch follows a step 1..L-1); allowed '
      'values: an integer >= 2'
    )
  epochs = client.local_epochs
  if epochs is not None and not (float(epochs).is_integer() and epochs >= 2):
    raise ConfigError(
      f'client.local_epochs={epochs!r} is invalid with algorithm='
      f'{config.algorithm!r} (the fetch follows an epoch 1..L-1); allowed '
      'values: an integer >= 2'
    )


def _validate_fedasmu_baselines(config: ml_collections.ConfigDict) -> None:
  """`moon`, `feddyn`, `port` and `asofed` sections, and the shared client terms that the
  objectives of moon, feddyn and asofed replace."""
  moon = config.moon
  _positive('moon.mu', moon.mu, allow_zero=True)
  _positive('moon.temperature', moon.temperature)
  _choice('moon.representation', moon.representation, REPRESENTATIONS)
  _positive('feddyn.alpha', config.feddyn.alpha)
  port = config.port
  _positive('port.similarity_weight', port.similarity_weight, allow_zero=True)
  _positive('port.staleness_weight', port.staleness_weight, allow_zero=True)
  if port.similarity_weight + port.staleness_weight <= 0:
    raise ConfigError(
      'port.similarity_weight / port.staleness_weight: both are 0; allowed '
      'values: numbers >= 0, not both 0'
    )
  _positive('port.staleness_bound', port.staleness_bound)
  _choice('port.similarity_reference', port.similarity_reference, SIMILARITY_REFERENCES)
  _positive(
    'port.similarity_min_staleness', port.similarity_min_staleness, integer=True, allow_zero=True
  )
  asofed = config.asofed
  _positive('asofed.proximal', asofed.proximal, allow_zero=True)
  _unit_interval('asofed.decay', asofed.decay)
  _choice('asofed.decay_gradient', asofed.decay_gradient, DECAY_GRADIENTS)
  if not isinstance(asofed.dynamic_step_size, bool):
    raise ConfigError(
      f'asofed.dynamic_step_size={asofed.dynamic_step_size!r} is invalid; '
      'allowed values: True, False'
    )
  _choice('asofed.delay_measure', asofed.delay_measure, DELAY_MEASURES)
  if config.algorithm in ('moon', 'feddyn', 'asofed'):
    for name in ('proximal_strength', 'distillation_strength'):
      if config.client[name] != 0:
        raise ConfigError(
          f'client.{name}={config.client[name]!r} is invalid with algorithm='
          f'{config.algorithm!r} (its own objective replaces it); allowed '
          'values: 0'
        )
  if config.algorithm == 'feddyn' and config.model.norm == 'batch':
    raise ConfigError(
      "model.norm='batch' is invalid with algorithm='feddyn' (its regulariser "
      "covers trainable weights only); allowed values: 'group', 'none'"
    )


def _validate_fedasmu_fetch(fetch: ml_collections.ConfigDict) -> None:
  _choice('fedasmu_fetch.policy', fetch.policy, FETCH_POLICIES)
  _positive('fedasmu_fetch.hidden_size', fetch.hidden_size, integer=True)
  features = fetch.features
  if (
    not isinstance(features, (tuple, list))
    or not features
    or len(set(features)) != len(features)
    or not set(features) <= set(META_FEATURES)
  ):
    raise ConfigError(
      f'fedasmu_fetch.features={features!r} is invalid; allowed values: a '
      f'non-empty tuple of distinct names from {list(META_FEATURES)}'
    )
  _choice('fedasmu_fetch.hazard_prior', fetch.hazard_prior, HAZARD_PRIORS)
  _positive('fedasmu_fetch.pretrain_passes', fetch.pretrain_passes, integer=True)
  _positive('fedasmu_fetch.learning_rate', fetch.learning_rate)
  _choice('fedasmu_fetch.baseline_scope', fetch.baseline_scope, BASELINE_SCOPES)
  _choice('fedasmu_fetch.meta_exploit', fetch.meta_exploit, META_EXPLOITS)
  _choice('fedasmu_fetch.q_bootstrap', fetch.q_bootstrap, Q_BOOTSTRAPS)
  for name, low, high in (
    ('baseline_decay', '<', '<='),
    ('epsilon', '<=', '<='),
    ('q_learning_rate', '<', '<='),
    ('q_discount', '<=', '<'),
  ):
    value = fetch[name]
    ok = (
      isinstance(value, (int, float))
      and not isinstance(value, bool)
      and (0 < value if low == '<' else 0 <= value)
      and (value < 1 if high == '<' else value <= 1)
    )
    if not ok:
      raise ConfigError(
        f'fedasmu_fetch.{name}={value!r} is invalid; allowed values: 0 {low} x {high} 1'
      )
  if (
    isinstance(fetch.baseline_init, bool)
    or not isinstance(fetch.baseline_init, (int, float))
    or not math.isfinite(fetch.baseline_init)
  ):
    raise ConfigError(
      f'fedasmu_fetch.baseline_init={fetch.baseline_init!r} is invalid; '
      'allowed values: a finite number'
    )
