"""FedASMU (Liu et al., AAAI 2024): the paper's settings, numbers and result tables.

Paper: "FedASMU: Efficient Asynchronous Federated Learning with Dynamic Staleness-aware Model
Update". Pieces:

* `make_config` builds one run of the paper's comparison (Sec. 5, Tables 1-2) or its ablations
  (Fig. 2: FedASMU-DA, -FA, -0; appendix "Request Time Slot Selection": H1-H3) for one column
  of `COLUMNS`: LeNet on Fashion-MNIST (Table 2's last column), LeNet and the Table-3 CNN on
  CIFAR-10 (Table 1). Every method's own settings come from one small function
  (`fedasmu_settings`, `fedprox_settings`, ...), the only place that names its settings (fields
  of its `algorithm.kwargs`).
* `PAPER_RESULTS` holds those columns of Tables 1 and 2 (convergence accuracy, time to the
  column's target; None for the paper's "/"), `PAPER_ABLATIONS` the ranges Sec. 5 quotes for
  the ablations.
* `results_table`, `ordering_table` and `ablation_table` turn run records into markdown with
  the paper's figures beside ours; `ordering` compares our ordering of the methods by accuracy
  with the paper's (Spearman's rho).

The system model (Sec. 3, appendix "Experiment details", Tables 5-6), shared by all methods:

* m = 100 devices (`num_clients`), Dirichlet label skew (the paper cites NIID-Bench, Li et al.
  2021, without the concentration; `DEFAULT_CONCENTRATION` = 0.5, NIID-Bench's default).
* Device heterogeneity: the `device_ratio` latency model with the paper's fastest-to-slowest
  training-time ratio 5 (`DEVICE_RATIO`); per-step time of the fastest device
  `DEFAULT_FASTEST_STEP_TIME` = 0.1 virtual seconds (the paper gives no time unit or scale, so
  only orderings and ratios of our times compare with its "Time" columns).
* Asynchronous methods: at most 10% of the devices train at once (the appendix's "maximum
  parallelism constraint, i.e., 10% of the total device number"; Table 5 gives m' = 10 devices
  per trigger, not this cap). When this build has FedASMU's periodic trigger
  (`algorithm.kwargs.trigger_period`), every asynchronous method runs under it with the period
  𝒯 = 10 of Table 5 (`TRIGGER_PERIOD`); otherwise under the concurrency-capped asynchronous
  scheduler (a finished task is replaced at once). Each record says which (`trigger_period`).
  Synchronous methods (FedAvg, FedProx, MOON, FedDyn) select the same 10% (m' = 10 of 100) per
  round.
* Budget: T = 500 server versions (Tables 5-6: "maximum number of global rounds"; aggregations
  for asynchronous methods, rounds for synchronous ones; the appendix text says 500 "epochs"
  for synchronous and 5000 for asynchronous approaches, pass `num_rounds` to follow it), and
  optionally a common virtual-time budget (`max_virtual_time`).
* Local training: plain SGD at Table 5's eta_i for every method (the paper tunes each baseline
  but reports no values); `DEFAULT_LOCAL_EPOCHS` = 5 local epochs (𝓛, not stated; FedASMU
  fetches after one of epochs 1..𝓛-1, so the heuristics H1-H3 differ only for 𝓛 >= 4) with
  batch size `DEFAULT_BATCH_SIZE` = 32 (not stated). The paper's learning-rate decay has no
  stated schedule and is not applied.
* Baselines (the paper states none of their settings): FedProx mu = `FEDPROX_MU` = 0.01 (the
  FedProx paper's grid); FedAsync alpha = 0.6 with the polynomial staleness (t - tau + 1)^-0.5
  (FedAsync paper, Xie et al. 2019); FedBuff, PORT and FedSA aggregate buffers of
  `buffer_size` = 5 updates (half the 10 devices in flight; FedBuff with 1/sqrt(1 + staleness)
  weights and server learning rate 1, Nguyen et al. 2022; FedSA with the same staleness
  function); MOON mu = 5 on CIFAR-10 and 1 on Fashion-MNIST, temperature 0.5 (MOON Sec. 4.1);
  FedDyn alpha = 0.01; the rest of PORT's and ASO-Fed's settings are the defaults of their
  settings classes (from their own papers, see their modules).

A run record is a mapping with keys method, model, dataset, seed, final_accuracy, best_accuracy
(fractions) and time_to_target (virtual seconds, None when the target was never reached).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ml_collections

from experiments import agreement
from experiments.sweep import (
  check_choice,
  markdown_table,
  mean_std,
  mean_time_to_target,
  set_existing,
  spearman,
  write_results,
  write_text,
)
from fedsim_jax.config import ConfigError, base_config

# Rows in the order of Tables 1-2, then the ablations (Fig. 2 and the H1-H3 appendix table).
METHODS = (
  'fedasmu',
  'fedavg',
  'fedprox',
  'moon',
  'feddyn',
  'fedasync',
  'port',
  'asofed',
  'fedbuff',
  'fedsa',
  'fedasmu_da',
  'fedasmu_fa',
  'fedasmu_0',
  'fedasmu_h1',
  'fedasmu_h2',
  'fedasmu_h3',
)
SYNCHRONOUS = ('fedavg', 'fedprox', 'moon', 'feddyn')
FEDASMU_VARIANTS = (
  'fedasmu',
  'fedasmu_da',
  'fedasmu_fa',
  'fedasmu_0',
  'fedasmu_h1',
  'fedasmu_h2',
  'fedasmu_h3',
)
BASELINES = (
  'fedavg',
  'fedprox',
  'moon',
  'feddyn',
  'fedasync',
  'port',
  'asofed',
  'fedbuff',
  'fedsa',
)
DISPLAY_NAMES = {
  'fedasmu': 'FedASMU',
  'fedavg': 'FedAvg',
  'fedprox': 'FedProx',
  'moon': 'MOON',
  'feddyn': 'FedDyn',
  'fedasync': 'FedAsync',
  'port': 'PORT',
  'asofed': 'ASO-Fed',
  'fedbuff': 'FedBuff',
  'fedsa': 'FedSA',
  'fedasmu_da': 'FedASMU-DA',
  'fedasmu_fa': 'FedASMU-FA',
  'fedasmu_0': 'FedASMU-0',
  'fedasmu_h1': 'FedASMU (H1)',
  'fedasmu_h2': 'FedASMU (H2)',
  'fedasmu_h3': 'FedASMU (H3)',
}

# Columns (model, dataset) of Tables 1-2 reproduced here, with the dataset each needs.
DATASETS = ('fashion_mnist', 'cifar10')
DATASET_MODELS = {'fashion_mnist': ('lenet5',), 'cifar10': ('lenet5', 'fedasmu_cnn')}
COLUMNS = tuple((model, dataset) for dataset in DATASETS for model in DATASET_MODELS[dataset])
COLUMN_NAMES = {
  ('lenet5', 'fashion_mnist'): 'LeNet FMNIST',
  ('lenet5', 'cifar10'): 'LeNet CIFAR-10',
  ('fedasmu_cnn', 'cifar10'): 'CNN CIFAR-10',
}
# Target accuracies of the "Time" columns (captions of Tables 1 and 2).
TARGET_ACCURACY = {
  ('lenet5', 'fashion_mnist'): 0.70,
  ('lenet5', 'cifar10'): 0.30,
  ('fedasmu_cnn', 'cifar10'): 0.40,
}

# Table 5: eta_i (the devices' learning rate) and FedASMU's control-parameter learning rates
# eta_lambda, eta_sigma, eta_iota (server, Formula 3) and eta_gamma, eta_v (devices, Formula 9),
# as the settings `algorithm.kwargs.<name>_learning_rate`.
CLIENT_LEARNING_RATE = {
  ('lenet5', 'fashion_mnist'): 0.005,
  ('lenet5', 'cifar10'): 0.03,
  ('fedasmu_cnn', 'cifar10'): 0.028,
}
_RATE_NAMES = ('lambda', 'sigma', 'iota', 'gamma', 'v')
FEDASMU_LEARNING_RATES = {
  column: {f'{name}_learning_rate': rate for name, rate in zip(_RATE_NAMES, rates)}
  for column, rates in {
    ('lenet5', 'fashion_mnist'): (1e-4, 1e-4, 1e-4, 1e-4, 1e-4),
    ('lenet5', 'cifar10'): (1e-3, 1e-3, 0.1, 0.1, 1e-3),
    ('fedasmu_cnn', 'cifar10'): (1e-3, 1e-3, 1e-4, 0.1, 1e-3),
  }.items()
}
# How each FedASMU variant requests the fresh global model (`algorithm.kwargs.fetch_policy`):
# the RL selector, none (FedASMU-FA, FedASMU-0) or the appendix's fixed heuristics H1-H3.
FETCH_POLICY = {
  'fedasmu': 'learned',
  'fedasmu_da': 'learned',
  'fedasmu_fa': 'none',
  'fedasmu_0': 'none',
  'fedasmu_h1': 'h1',
  'fedasmu_h2': 'h2',
  'fedasmu_h3': 'h3',
}

PAPER_NUM_CLIENTS = 100  # m (Tables 5-6)
TAU = 99  # staleness bound tau (Tables 5-6)
PAPER_NUM_ROUNDS = 500  # T (Tables 5-6)
DEVICE_FRACTION = 0.1  # m' = 10 of m = 100; the 10% parallelism cap (appendix)
TRIGGER_PERIOD = 10.0  # 𝒯 (Tables 5-6)
DEVICE_RATIO = 5.0  # slowest / fastest training time (appendix)
DEFAULT_FASTEST_STEP_TIME = 0.1  # virtual seconds per local step on the fastest device
DEFAULT_CONCENTRATION = 0.5  # Dirichlet alpha (not stated; NIID-Bench's default)
DEFAULT_LOCAL_EPOCHS = 5  # 𝓛 (not stated)
DEFAULT_BATCH_SIZE = 32  # not stated
DEFAULT_EVAL_EVERY = 5  # server versions between test evaluations
FEDPROX_MU = 0.01
FEDASYNC_ALPHA = 0.6
FEDASYNC_STALENESS_A = 0.5
MOON_MU = {'cifar10': 5.0}
MOON_TEMPERATURE = 0.5
FEDDYN_ALPHA = 0.01

# Table 1 (LeNet and CNN on CIFAR-10) and Table 2 (LeNet on FMNIST), as printed: Acc, Time.
_PAPER_TABLE = """
| Method   | LeNet C10 Acc | Time   | CNN C10 Acc | Time   | LeNet FMNIST Acc | Time  |
| FedASMU  | 0.486 | 8800   | 0.603 | 10109  | 0.829 | 8250  |
| FedAvg   | 0.431 | 125514 | 0.551 | 117794 | 0.706 | 65000 |
| FedProx  | 0.363 | 126958 | 0.371 | /      | 0.708 | 65000 |
| MOON     | 0.302 | 437531 | 0.47  | 100302 | 0.708 | 65000 |
| FedDyn   | 0.279 | /      | 0.507 | 43974  | 0.761 | 40607 |
| FedAsync | 0.478 | 36565  | 0.491 | 24931  | 0.779 | 12371 |
| PORT     | 0.305 | 366182 | 0.385 | /      | 0.711 | 75716 |
| ASO-Fed  | 0.408 | 83712  | 0.482 | 92246  | 0.756 | 41100 |
| FedBuff  | 0.365 | 9829   | 0.364 | /      | 0.767 | 27179 |
| FedSA    | 0.306 | 21077  | 0.508 | 20415  | 0.783 | 8553  |
"""
_PAPER_COLUMNS = (('lenet5', 'cifar10'), ('fedasmu_cnn', 'cifar10'), ('lenet5', 'fashion_mnist'))
_ROW_KEYS = {name: method for method, name in DISPLAY_NAMES.items()}


def _parse_paper_table(text: str) -> dict[tuple[str, str], dict[str, tuple[float, float | None]]]:
  """{column: {method: (accuracy, time to target or None for "/")}}."""
  table: dict[tuple[str, str], dict[str, tuple[float, float | None]]] = {
    column: {} for column in _PAPER_COLUMNS
  }
  for line in text.strip().splitlines()[1:]:
    cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
    if len(cells) != 1 + 2 * len(_PAPER_COLUMNS):
      raise AssertionError(f'transcription error in row {cells[0]!r}')
    for i, column in enumerate(_PAPER_COLUMNS):
      accuracy, time = cells[1 + 2 * i], cells[2 + 2 * i]
      table[column][_ROW_KEYS[cells[0]]] = (float(accuracy), None if time == '/' else float(time))
  return table


PAPER_RESULTS = _parse_paper_table(_PAPER_TABLE)

# Sec. 5's ablation ranges over LeNet and CNN on CIFAR-10 (Fig. 2, targets 0.30 / 0.40) and the
# appendix's heuristics (setting not stated): (method, reference, accuracy gain in percentage
# points (low, high), time saved to target in % of the reference's time (low, high) or None).
PAPER_ABLATIONS: tuple[tuple[str, str, tuple[float, float], tuple[float, float] | None], ...] = (
  ('fedasmu', 'fedasmu_da', (1.38, 4.32), None),
  ('fedasmu_fa', 'fedasmu_0', (0.65, 3.04), None),
  ('fedasmu', 'fedasmu_fa', (1.75, 4.71), (44.77, 73.96)),
  ('fedasmu_da', 'fedasmu_0', (1.04, 3.41), (15.71, 19.54)),
  ('fedasmu_da', 'fedavg', (0.73, 3.75), (72.88, 85.72)),
  ('fedasmu_fa', 'fedavg', (0.73, 3.75), (72.88, 85.72)),
  ('fedasmu_0', 'fedavg', (0.08, 0.34), (67.84, 82.26)),
  ('fedasmu', 'fedasmu_h1', (2.4, 2.4), None),
  ('fedasmu', 'fedasmu_h2', (2.2, 2.2), None),
  ('fedasmu', 'fedasmu_h3', (2.8, 2.8), None),
)


# ------------------------------------------------------------------------------------------------
# Configs: the system model, then one function per method.


def devices_per_round(num_clients: int) -> int:
  """m' = the 10% of the devices that train at once (asynchronous cap, synchronous cohort)."""
  return max(1, round(DEVICE_FRACTION * num_clients))


def buffer_size(num_clients: int) -> int:
  """K of FedBuff and PORT, M of FedSA: half the devices in flight (5 of 10 for m = 100)."""
  return max(1, devices_per_round(num_clients) // 2)


KWARGS = 'algorithm.kwargs.'  # the prefix of an algorithm setting's dotted config path


def _kwargs(**settings: Any) -> dict[str, Any]:
  """Algorithm settings as dotted config paths."""
  return {KWARGS + name: value for name, value in settings.items()}


def periodic_trigger_available() -> bool:
  """Whether this build has FedASMU's periodic trigger (`algorithm.kwargs.trigger_period` of
  the asynchronous algorithms)."""
  from fedsim_jax.algorithms.groups import AsynchronousSettings

  return 'trigger_period' in AsynchronousSettings.field_names()


def system_settings(
  method: str, num_clients: int, fastest_step_time: float = DEFAULT_FASTEST_STEP_TIME
) -> dict[str, Any]:
  """The system model every method shares (module docstring), as dotted config paths."""
  settings: dict[str, Any] = {
    'latency.name': 'device_ratio',
    'latency.kwargs.ratio': DEVICE_RATIO,
    'latency.kwargs.fastest_step_time': fastest_step_time,
  }
  if method in SYNCHRONOUS:
    settings.update(_kwargs(cohort_size=devices_per_round(num_clients)))
  else:
    settings.update(_kwargs(concurrency=devices_per_round(num_clients)))
    # Every asynchronous method discards uploads with t - o + 1 > tau = 99 (Table 5), i.e.
    # staleness t - o > 98; FedASMU's own variants read `algorithm.kwargs.tau` (default 99)
    # instead.
    if not method.startswith('fedasmu'):
      settings.update(_kwargs(max_staleness=TAU - 1))
    if periodic_trigger_available():
      settings.update(_kwargs(trigger_period=TRIGGER_PERIOD))
  return settings


# The ablations without dynamic server weights (FedASMU-DA, FedASMU-0) aggregate with FedAsync's
# static rule: the same alpha and staleness function as the FedAsync baseline, so that the
# ablation isolates the dynamic weights.
STATIC_WEIGHT_METHODS = ('fedasmu_da', 'fedasmu_0')


def fedasmu_settings(method: str, column: tuple[str, str]) -> dict[str, Any]:
  """FedASMU and its ablations: Table 5's control-parameter learning rates for the column and
  the variant's fetch policy. The variant itself (dynamic or static server weights) is the
  algorithm name; the static variants take the FedAsync baseline's alpha and staleness."""
  settings = _kwargs(**FEDASMU_LEARNING_RATES[column], fetch_policy=FETCH_POLICY[method])
  if method in STATIC_WEIGHT_METHODS:
    settings.update(
      _kwargs(alpha=FEDASYNC_ALPHA, staleness='polynomial', staleness_a=FEDASYNC_STALENESS_A)
    )
  return settings


def fedavg_settings() -> dict[str, Any]:
  """FedAvg: the server takes the cohort's weighted mean (server SGD, implied by the algorithm
  name, at learning rate 1)."""
  return _kwargs(server_learning_rate=1.0)


def fedprox_settings() -> dict[str, Any]:
  """FedProx: FedAvg with the proximal term (mu / 2) ||w - w_global||^2."""
  return {**fedavg_settings(), **_kwargs(proximal_strength=FEDPROX_MU)}


def moon_settings(column: tuple[str, str]) -> dict[str, Any]:
  """MOON: FedAvg with mu * the model-contrastive loss at temperature 0.5; mu = 5 on CIFAR-10
  (MOON, Sec. 4.1), 1 elsewhere (MOON's CIFAR-100 value; it has no Fashion-MNIST one)."""
  return {
    **fedavg_settings(),
    **_kwargs(mu=MOON_MU.get(column[1], 1.0), temperature=MOON_TEMPERATURE),
  }


def feddyn_settings() -> dict[str, Any]:
  """FedDyn: the dynamic regulariser's alpha (FedDyn's searched grid {0.1, 0.01, 0.001}) and
  Algorithm 1's unweighted average over the round's clients (1/|P_t|, as its h update)."""
  return _kwargs(alpha=FEDDYN_ALPHA, weighting='uniform')


def fedasync_settings() -> dict[str, Any]:
  """FedAsync: w <- (1 - a) w + a w_i with a = alpha (staleness + 1)^-0.5."""
  return _kwargs(
    alpha=FEDASYNC_ALPHA,
    staleness='polynomial',
    staleness_a=FEDASYNC_STALENESS_A,
    form='mixing',
  )


def fedbuff_settings(num_clients: int) -> dict[str, Any]:
  """FedBuff: buffers of K staleness-scaled deltas, averaged unweighted over K (Nguyen et al.
  2022, Algorithm 1), server SGD at learning rate 1."""
  return _kwargs(
    buffer_size=buffer_size(num_clients),
    weighting='uniform',
    server_optimizer='sgd',
    server_learning_rate=1.0,
    staleness='polynomial',
    staleness_a=0.5,
    normalization='count',
  )


def port_settings(num_clients: int) -> dict[str, Any]:
  """PORT: buffers of K updates weighted by staleness and similarity; the weights' settings are
  the defaults of `PortSettings` (PORT / PLATO, see algorithms/port.py)."""
  return _kwargs(buffer_size=buffer_size(num_clients))


def asofed_settings() -> dict[str, Any]:
  """ASO-Fed: one update at a time; its settings are the defaults of `AsoFedSettings` (the
  ASO-Fed paper, see algorithms/asofed.py)."""
  return {}


def fedsa_settings(num_clients: int) -> dict[str, Any]:
  """FedSA: buffers of M = K updates weighted by examples and (staleness + 1)^-0.5."""
  return _kwargs(buffer_size=buffer_size(num_clients), staleness='polynomial', staleness_a=0.5)


def method_settings(
  method: str, column: tuple[str, str], num_clients: int = PAPER_NUM_CLIENTS
) -> dict[str, Any]:
  """The method's own settings, as dotted config paths."""
  if method in FEDASMU_VARIANTS:
    return fedasmu_settings(method, column)
  if method == 'moon':
    return moon_settings(column)
  if method in ('fedbuff', 'port', 'fedsa'):
    return {'fedbuff': fedbuff_settings, 'port': port_settings, 'fedsa': fedsa_settings}[method](
      num_clients
    )
  return {
    'fedavg': fedavg_settings,
    'fedprox': fedprox_settings,
    'feddyn': feddyn_settings,
    'fedasync': fedasync_settings,
    'asofed': asofed_settings,
  }[method]()


def registered_methods() -> list[str]:
  """The methods this build can run (their algorithm is registered)."""
  from fedsim_jax import algorithms

  registered = algorithms.names()
  return [method for method in METHODS if method in registered]


def make_config(
  method: str,
  model: str,
  dataset: str,
  *,
  seed: int = 0,
  data_dir: str | None = None,
  num_clients: int = PAPER_NUM_CLIENTS,
  concentration: float = DEFAULT_CONCENTRATION,
  num_rounds: int | None = PAPER_NUM_ROUNDS,
  max_virtual_time: float | None = None,
  local_epochs: float = DEFAULT_LOCAL_EPOCHS,
  batch_size: int = DEFAULT_BATCH_SIZE,
  fastest_step_time: float = DEFAULT_FASTEST_STEP_TIME,
  eval_every: int = DEFAULT_EVAL_EVERY,
) -> ml_collections.ConfigDict:
  """One run: `method` on the (model, dataset) column under the paper's system model.

  Args:
    method: one of `METHODS` (registered in this build, see `registered_methods`).
    model, dataset: a column of `COLUMNS`.
    seed: run seed (also the partition seed).
    data_dir: prepared-datasets directory; None: the library default.
    num_clients: m (the paper: 100); the cap / cohort is 10% of it.
    concentration: Dirichlet alpha of the label split.
    num_rounds: server versions (the paper's T = 500); None: no limit (then give
      `max_virtual_time`).
    max_virtual_time: virtual-seconds budget for every method; None: none.
    local_epochs: 𝓛, local epochs per task.
    batch_size: local mini-batch size.
    fastest_step_time: virtual seconds per local step of the fastest device.
    eval_every: server versions between test evaluations.

  Raises:
    ConfigError: an unknown choice, a method this build lacks, an invalid value or a setting
      this build does not have.
  """
  check_choice('method', method, METHODS)
  check_choice('dataset', dataset, DATASETS)
  check_choice('model', model, DATASET_MODELS[dataset])
  from fedsim_jax import algorithms

  if method not in algorithms.names():
    raise ConfigError(
      f'method={method!r} is not registered in this build (fedsim_jax.algorithms.names()); '
      f'allowed values: {registered_methods()}'
    )
  if num_rounds is None and max_virtual_time is None:
    raise ConfigError('num_rounds / max_virtual_time: give at least one budget')
  column = (model, dataset)
  c = base_config()
  c.seed = seed
  c.algorithm.name = method
  c.data.name = dataset
  c.data.data_dir = data_dir
  c.data.num_clients = num_clients
  c.partition.name = 'dirichlet'
  c.partition.kwargs.concentration = float(concentration)
  c.model.name = model
  c.client.optimizer = 'sgd'
  c.client.learning_rate = CLIENT_LEARNING_RATE[column]
  c.client.batch_size = batch_size
  c.client.local_steps = None
  c.client.local_epochs = float(local_epochs)
  c.run.num_rounds = num_rounds
  c.run.max_virtual_time = None if max_virtual_time is None else float(max_virtual_time)
  c.run.eval_every = eval_every
  c.run.target_accuracy = TARGET_ACCURACY[column]
  for path, value in {
    **system_settings(method, num_clients, fastest_step_time),
    **method_settings(method, column, num_clients),
  }.items():
    if path.startswith(KWARGS):  # the algorithm's settings check these names (validate below)
      c.algorithm.kwargs[path[len(KWARGS) :]] = value
    else:
      set_existing(c, path, value)
  from fedsim_jax.experiment import validate

  validate(c)
  return c


# ------------------------------------------------------------------------------------------------
# Tables.


def _column_key(record: Mapping[str, Any]) -> tuple[str, str]:
  return (record['model'], record['dataset'])


def _sorted_columns(columns: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
  return sorted(set(columns), key=lambda c: (COLUMNS.index(c) if c in COLUMNS else 99, c))


def _group(
  records: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str], dict[str, list[Mapping[str, Any]]]]:
  """{column: {method: [records over seeds]}}, methods in `METHODS` order."""
  grouped: dict[tuple[str, str], dict[str, list[Mapping[str, Any]]]] = {}
  for record in records:
    grouped.setdefault(_column_key(record), {}).setdefault(record['method'], []).append(record)
  return {
    column: dict(
      sorted(
        methods.items(), key=lambda kv: (METHODS.index(kv[0]) if kv[0] in METHODS else 99, kv[0])
      )
    )
    for column, methods in grouped.items()
  }


def summarize_method(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """One method in one column over its seeds: mean final and best accuracy, their sample
  stds, and the mean time to target (None, the paper's "/", when the target was missed in at
  least half of the seeds)."""
  final, final_std = mean_std([r['final_accuracy'] for r in records])
  best, _ = mean_std([r['best_accuracy'] for r in records])
  return {
    'final_accuracy': final,
    'final_std': final_std,
    'best_accuracy': best,
    'time_to_target': mean_time_to_target(records),
    'seeds': len(records),
  }


def _accuracy(value: float, std: float = 0.0, seeds: int = 1) -> str:
  return f'{value:.3f}' if seeds < 2 else f'{value:.3f}±{std:.3f}'


def _time(value: float | None) -> str:
  return '/' if value is None else f'{value:,.0f}'


def _mean(records: Sequence[Mapping[str, Any]], key: str) -> float | None:
  values = [r[key] for r in records if r.get(key) is not None]
  return sum(values) / len(values) if values else None


def results_table(records: Iterable[Mapping[str, Any]]) -> str:
  """Markdown, one block per column: per method the final ("convergence") accuracy, the best
  accuracy and the virtual time to the column's target ("/" when missed), the paper's accuracy
  and time beside ("-" for rows the paper has no number for), and the run's length."""
  grouped = _group(records)
  blocks = []
  for column in _sorted_columns(grouped):
    paper = PAPER_RESULTS.get(column, {})
    rows = []
    for method, runs in grouped[column].items():
      ours = summarize_method(runs)
      paper_accuracy, paper_time = paper.get(method, (None, None))
      known = method in paper
      versions, virtual_time = _mean(runs, 'final_version'), _mean(runs, 'final_virtual_time')
      rows.append(
        [
          DISPLAY_NAMES.get(method, method),
          _accuracy(ours['final_accuracy'], ours['final_std'], ours['seeds']),
          f'{paper_accuracy:.3f}' if known else '-',
          f'{ours["best_accuracy"]:.3f}',
          _time(ours['time_to_target']),
          _time(paper_time) if known else '-',
          '-' if versions is None else f'{versions:,.0f}',
          '-' if virtual_time is None else f'{virtual_time:,.0f}',
          str(ours['seeds']),
        ]
      )
    target = TARGET_ACCURACY.get(column)
    title = COLUMN_NAMES.get(column, f'{column[0]} {column[1]}')
    target_text = f'{target:.2f}' if target is not None else '?'
    blocks.append(
      f'**{title}** (target accuracy {target_text})\n\n'
      + markdown_table(
        [
          'Method',
          'Acc (final)',
          'paper Acc',
          'best Acc',
          f'Time to {target_text} (s)',
          'paper Time',
          'versions',
          'virtual time (s)',
          'seeds',
        ],
        rows,
      )
    )
  return '\n\n'.join(blocks)


def per_seed_table(records: Iterable[Mapping[str, Any]]) -> str:
  """Markdown, one block per column: per method, the final / best accuracy of each seed ("-"
  for a seed the method did not run)."""
  grouped = _group(records)
  blocks = []
  for column in _sorted_columns(grouped):
    seeds = sorted({r['seed'] for runs in grouped[column].values() for r in runs})
    rows = []
    for method, runs in grouped[column].items():
      by_seed = {r['seed']: r for r in runs}
      rows.append(
        [DISPLAY_NAMES.get(method, method)]
        + [
          f'{by_seed[s]["final_accuracy"]:.3f} / {by_seed[s]["best_accuracy"]:.3f}'
          if s in by_seed
          else '-'
          for s in seeds
        ]
      )
    title = COLUMN_NAMES.get(column, f'{column[0]} {column[1]}')
    header = ['Method'] + [f'seed {s}: final / best' for s in seeds]
    blocks.append(f'**{title}**\n\n' + markdown_table(header, rows))
  return '\n\n'.join(blocks)


def ordering(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """Per column, our ordering of the methods against the paper's: Spearman's rho between our
  final accuracy and the paper's accuracy over the methods both have ('accuracy_rho', None for
  fewer than three), the same for the time to target over the methods that reached it in both
  ('time_rho'; 'time_methods' counts them), both rankings (most accurate first) and whether
  FedASMU's mean is the highest of the Table 1-2 methods run, ours and the paper's (None
  without FedASMU or a baseline; `claims` assesses that conclusion seed by seed)."""
  rows = []
  for column, methods in sorted(
    _group(records).items(), key=lambda kv: _sorted_columns([kv[0]])[0]
  ):
    paper = PAPER_RESULTS.get(column, {})
    ours = {method: summarize_method(runs) for method, runs in methods.items()}
    both = [m for m in ours if m in paper]
    accuracy = {m: ours[m]['final_accuracy'] for m in both}
    timed = [m for m in both if ours[m]['time_to_target'] is not None and paper[m][1] is not None]
    ranked_ours = sorted(both, key=lambda m: -accuracy[m])
    ranked_paper = sorted(both, key=lambda m: -paper[m][0])
    compared = [m for m in both if m != 'fedasmu']
    best_ours = best_paper = None
    if 'fedasmu' in both and compared:
      best_ours = all(accuracy['fedasmu'] > accuracy[m] for m in compared)
      best_paper = all(paper['fedasmu'][0] > paper[m][0] for m in compared)
    rows.append(
      {
        'column': column,
        'methods': both,
        'accuracy_rho': spearman([accuracy[m] for m in both], [paper[m][0] for m in both]),
        'time_rho': spearman(
          [ours[m]['time_to_target'] for m in timed], [paper[m][1] for m in timed]
        ),
        'time_methods': len(timed),
        'ours_ranking': ranked_ours,
        'paper_ranking': ranked_paper,
        'fedasmu_best_ours': best_ours,
        'fedasmu_best_paper': best_paper,
      }
    )
  return rows


def ordering_table(records: Iterable[Mapping[str, Any]]) -> str:
  """Markdown: `ordering` per column."""
  rows = ordering(records)
  if not any(row['methods'] for row in rows):
    return 'No run of a method of Tables 1-2 in a column the paper reports; nothing to compare.'

  def rho(value: float | None) -> str:
    return '-' if value is None else f'{value:+.2f}'

  def names(methods: Sequence[str]) -> str:
    return ' > '.join(DISPLAY_NAMES.get(m, m) for m in methods)

  return markdown_table(
    [
      'Column',
      'methods',
      'Spearman ρ (accuracy)',
      'Spearman ρ (time)',
      'methods timed',
      'our ranking by accuracy',
      "paper's ranking",
    ],
    [
      [
        COLUMN_NAMES.get(r['column'], str(r['column'])),
        str(len(r['methods'])),
        rho(r['accuracy_rho']),
        rho(r['time_rho']),
        str(r['time_methods']),
        names(r['ours_ranking']),
        names(r['paper_ranking']),
      ]
      for r in rows
      if r['methods']
    ],
  )


def _range(values: tuple[float, float] | None, unit: str) -> str:
  if values is None:
    return '-'
  low, high = values
  return f'{low:g}{unit}' if low == high else f'{low:g} to {high:g}{unit}'


def ablation_table(records: Iterable[Mapping[str, Any]]) -> str:
  """Markdown: each comparison of `PAPER_ABLATIONS` whose two methods ran on a common seed in
  a column: our accuracy gain (percentage points of final accuracy) and time saved to the target
  (% of the reference's time; "/" when either missed it), both over the seeds the two share,
  beside the paper's ranges."""
  grouped = _group(records)
  rows = []
  for column in _sorted_columns(grouped):
    methods = grouped[column]
    for method, reference, paper_gain, paper_saved in PAPER_ABLATIONS:
      if method not in methods or reference not in methods:
        continue
      seeds = {r['seed'] for r in methods[method]} & {r['seed'] for r in methods[reference]}
      if not seeds:
        continue
      ours, ref = (
        summarize_method([r for r in methods[name] if r['seed'] in seeds])
        for name in (method, reference)
      )
      gain = 100 * (ours['final_accuracy'] - ref['final_accuracy'])
      saved = '/'
      if ours['time_to_target'] is not None and ref['time_to_target'] is not None:
        saved = f'{100 * (1 - ours["time_to_target"] / ref["time_to_target"]):+.1f}%'
      rows.append(
        [
          COLUMN_NAMES.get(column, str(column)),
          f'{DISPLAY_NAMES[method]} vs {DISPLAY_NAMES[reference]}',
          f'{gain:+.2f}',
          _range(paper_gain, ''),
          saved,
          _range(paper_saved, '%'),
          str(len(seeds)),
        ]
      )
  if not rows:
    return 'No ablation pair (e.g. FedASMU and FedASMU-DA) ran on a common seed in a column.'
  header = ['Column', 'Comparison', 'accuracy gain (pp), ours', 'paper', 'time saved, ours']
  return markdown_table(header + ['paper', 'seeds'], rows)


# ------------------------------------------------------------------------------------------------
# The paper's conclusions (Sec. 5, Tables 1-2, Fig. 2, the appendix's H1-H3), assessed by
# `experiments.agreement`.


def _accuracy_values(runs: Sequence[Mapping[str, Any]]) -> dict[int, agreement.Value | None]:
  """Final accuracy in percentage points per seed."""
  return {
    int(r['seed']): agreement.exact(
      None if r['final_accuracy'] is None else 100 * r['final_accuracy']
    )
    for r in runs
  }


def _time_values(runs: Sequence[Mapping[str, Any]]) -> dict[int, agreement.Value | None]:
  """Virtual time to the target per seed; a miss is a bound at the run's end."""
  return {
    int(r['seed']): agreement.time_value(r.get('time_to_target'), r.get('final_virtual_time'))
    for r in runs
  }


def _names(methods: Iterable[str]) -> str:
  return ', '.join(DISPLAY_NAMES.get(m, m) for m in methods)


def _combined_names(word: str, methods: Sequence[str]) -> str:
  """'FedAvg' for one method, '<word> of FedAvg, FedProx' for several."""
  return _names(methods) if len(methods) == 1 else f'{word} of {_names(methods)}'


def _covering(methods: Mapping[str, Sequence[Mapping[str, Any]]], subject: str, candidates):
  """The candidates that ran on every seed `subject` ran on (paired comparisons need all)."""
  seeds = {r['seed'] for r in methods[subject]}
  return [m for m in candidates if m in methods and seeds <= {r['seed'] for r in methods[m]}]


def _headline_claims(column, methods) -> list[agreement.Claim]:
  """Sec. 5: "FedASMU consistently corresponds to the highest convergence accuracy and training
  speed", and its speed against the synchronous methods."""
  paper = PAPER_RESULTS.get(column)
  if not paper or 'fedasmu' not in methods:
    return []
  found = []
  others = _covering(methods, 'fedasmu', [m for m in BASELINES if m in paper])
  if others:
    best = max(others, key=lambda m: paper[m][0])
    gap = 100 * (paper['fedasmu'][0] - paper[best][0])
    found.append(
      agreement.Claim(
        claim='FedASMU is the most accurate method',
        source='Sec. 5, Tables 1-2',
        paper=f'FedASMU {paper["fedasmu"][0]:.3f} vs {DISPLAY_NAMES[best]} '
        f'{paper[best][0]:.3f} ({gap:+.1f} pp)',
        quantity=f'FedASMU − {_combined_names("the best", others)}, final accuracy (pp)',
        side='>',
        seeds=agreement.paired(
          _accuracy_values(methods['fedasmu']),
          agreement.combined([_accuracy_values(methods[m]) for m in others], agreement.maximum),
        ),
      )
    )
  for claim, source, candidates in (
    ('FedASMU reaches the target first', 'Sec. 5, Tables 1-2', BASELINES),
    ('FedASMU reaches the target before the synchronous methods', 'Sec. 5', SYNCHRONOUS),
  ):
    others = _covering(methods, 'fedasmu', [m for m in candidates if m in paper])
    reached = {m: time for m in others if (time := paper[m][1]) is not None}
    own_time = paper['fedasmu'][1]
    if not others or own_time is None or not reached:
      continue
    fastest = min(reached, key=reached.__getitem__)
    if own_time >= reached[fastest]:
      continue  # not what the paper's table shows in this column
    found.append(
      agreement.Claim(
        claim=claim,
        source=source,
        paper=f'FedASMU {own_time:,.0f} vs {DISPLAY_NAMES[fastest]} '
        f'{reached[fastest]:,.0f} (no unit)',
        quantity=f'FedASMU − {_combined_names("the fastest", others)}, virtual time to '
        f'{TARGET_ACCURACY[column]:.2f} (s)',
        side='<',
        seeds=agreement.paired(
          _time_values(methods['fedasmu']),
          agreement.combined([_time_values(methods[m]) for m in others], agreement.minimum),
        ),
        digits=0,
      )
    )
  return found


def _ablation_claims(methods) -> list[agreement.Claim]:
  """Sec. 5 (Fig. 2, CIFAR-10) and the appendix's heuristics: each variant against its
  reference, in accuracy and, where the paper gives it, in time to the target."""
  found = []
  for method, reference, paper_gain, paper_saved in PAPER_ABLATIONS:
    if method not in methods or reference not in methods:
      continue
    heuristic = reference.startswith('fedasmu_h')
    source = 'appendix, heuristics H1-H3' if heuristic else 'Sec. 5, Fig. 2, CIFAR-10'
    name, other = DISPLAY_NAMES[method], DISPLAY_NAMES[reference]
    found.append(
      agreement.Claim(
        claim=f'{name} is more accurate than {other}',
        source=source,
        paper=f'{_range(paper_gain, "")} pp',
        quantity=f'{name} − {other}, final accuracy (pp)',
        side='>',
        seeds=agreement.paired(
          _accuracy_values(methods[method]), _accuracy_values(methods[reference])
        ),
      )
    )
    if paper_saved is not None:
      found.append(
        agreement.Claim(
          claim=f'{name} reaches the target sooner than {other}',
          source=source,
          paper=f'{_range(paper_saved, "%")} less time',
          quantity=f'{other} − {name}, virtual time to the target (s)',
          side='>',
          seeds=agreement.paired(_time_values(methods[reference]), _time_values(methods[method])),
          digits=0,
        )
      )
  return found


def claims(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[agreement.Claim]]:
  """{column: the paper's conclusions whose methods ran in it, with ours per seed}."""
  grouped = _group(records)
  return {
    column: _headline_claims(column, grouped[column]) + _ablation_claims(grouped[column])
    for column in _sorted_columns(grouped)
  }


def agreement_table(records: Iterable[Mapping[str, Any]]) -> str:
  """Markdown, one block per column: the paper's conclusions against these runs
  (`experiments.agreement`)."""
  return agreement.agreement_blocks(
    (COLUMN_NAMES.get(column, f'{column[0]} {column[1]}'), found)
    for column, found in claims(records).items()
  )


def write_outputs(
  records: Sequence[dict[str, Any]],
  settings: dict[str, Any],
  workdir: str,
  output: str,
  wall_seconds: float,
) -> None:
  """Writes `<workdir>/results.jsonl` and the markdown tables to `output`, and prints them."""
  write_results(records, workdir)
  periods = sorted(
    {r.get('trigger_period') for r in records if r['method'] not in SYNCHRONOUS}, key=str
  )
  if not periods:
    system = 'no asynchronous method run'
  elif periods == [None]:
    system = (
      'asynchronous methods under the concurrency-capped scheduler (this build has no '
      'periodic trigger)'
    )
  else:
    system = 'asynchronous methods under the periodic trigger, period ' + ', '.join(
      'none (concurrency cap)' if p is None else f'{p:g}s' for p in periods
    )
  budget = f'{settings["num_rounds"]} server versions' if settings['num_rounds'] else ''
  if settings.get('max_virtual_time'):
    budget += (' or ' if budget else '') + f'{settings["max_virtual_time"]:g} virtual seconds'
  seeds = ','.join(map(str, settings['seeds']))
  text = (
    '\n\n'.join(
      [
        '# FedASMU reproduction (Tables 1-2, Fig. 2 ablations)',
        f'{settings["num_clients"]} devices, Dirichlet alpha {settings["concentration"]:g} '
        f'(not stated in the paper); devices per round / in flight: '
        f'{devices_per_round(settings["num_clients"])}; {system}; device_ratio latency (slowest/fastest {DEVICE_RATIO:g}, '
        f'fastest {settings["fastest_step_time"]:g}s per step); {settings["local_epochs"]:g} '
        f'local epochs, batch {settings["batch_size"]}; budget {budget} (the paper: T = 500); '
        f'evaluation every {settings["eval_every"]} versions; seeds {seeds}; {len(records)} runs; '
        f'wall time {wall_seconds:.0f}s.',
        'Acc = test accuracy at the end of the run (the paper\'s "convergence accuracy"), mean '
        '(± std) over seeds; Time = virtual seconds to first reach the target, mean over the seeds '
        'that reached it, "/" when missed in at least half of the seeds. The paper gives no time '
        'unit or scale: compare orderings and ratios, not seconds. Paper figures: Table 1 (CIFAR-10 '
        'columns) and Table 2 (LeNet FMNIST); "-": the paper has no such row.',
        '## Accuracy and time to target (Tables 1-2)',
        results_table(records),
        "## Ordering of the methods against the paper's",
        ordering_table(records),
        '## Ablations (Sec. 5 ranges: Fig. 2 on CIFAR-10; H1-H3 from the appendix)',
        ablation_table(records),
      ]
    )
    + '\n'
  )
  write_text(output, text)
  print(text, end='')
