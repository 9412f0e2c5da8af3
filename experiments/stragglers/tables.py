"""Learning from straggler clients (Hard et al.): the paper's settings, numbers and result tables.

Pieces:

* `make_config` builds one run of the paper's EMNIST experiments (Sec. 4, App. G, App. H
  Tables 20-21) for any of `ALGORITHMS` under either latency model of Sec. 3 (`per_example`,
  Table 1; `per_domain_per_example`, Table 2), with the hyperparameters of `HYPERPARAMETERS`.
* `PAPER_RESULTS` holds Tables 20 and 21 (EMNIST; median and 90% interval over 10 trials) and
  `PAPER_ROUND_TIMES` the synchronous round times that Tables 22-23 (CIFAR-100) imply.
* `results_table` / `curves_table` turn run records into a Table-20/21-style markdown table
  (straggler accuracy, total accuracy, total virtual time; median [5th, 95th percentile] over
  seeds, the paper's beside) and accuracy-against-virtual-time tables.
* `synchronous_round_times` / `round_time_table` / `round_time_report` compute the
  CIFAR-100-shaped round time from the latency model alone (no training) and set it beside the
  paper's implied figure.

How the offline task differs from the paper's, and what was chosen where it is silent (each a
named constant or `make_config` argument):

* Data: EMNIST (3,400 writers, 62 classes) is not available offline. The runs use MNIST (or
  Fashion-MNIST) split over `DEFAULT_NUM_CLIENTS` = 300 clients by a Dirichlet(alpha =
  `DEFAULT_CONCENTRATION` = 1) label split, standing in for the writer partition: clients of
  unequal size (about 200 examples on average before the split, as EMNIST's writers hold
  about 198 on average) with mixed labels. The straggler-domain split of Sec. 4.1 follows:
  the `num_stragglers` clients holding most examples of the straggler classes 0-4 (EMNIST's
  digits 0-4) keep all their data and become stragglers; the other clients lose those classes.
  `num_stragglers` defaults to the paper's share, round(300 x 800 / 3,400) = 71. The partition
  is fixed across trials (`PARTITION_SEED`), as EMNIST's writer partition is; trials differ in
  the run seed (model initialisation, client sampling, latency draws). MNIST's classes 0-4 hold
  about half of its examples (a smaller share of EMNIST-62's), so standard clients lose more
  data and stragglers hold relatively more than in the paper; the one-epoch latency
  percentiles of the federation are reported beside Table 7 so the time scale can be compared.
  Where a federated-EMNIST data dir with writer ids is prepared (converted from TFF's
  fed_emnist; `NATURAL_DATASETS`), `dataset='emnist'` runs the paper's task itself: one client
  per writer, 800 stragglers by default, 62 classes.
* Model: the paper's EMNIST CNN (`emnist_cnn`, Reddi et al.) with 10 outputs.
* Budget: counted in client updates as the paper does (100,000 = 2,000 FedAvg rounds of cohort
  50). Synchronous algorithms run `client_updates // cohort_size` rounds (`run.num_rounds`): the
  paper's over-selected runs took 2,000 rounds too (their times are 2,000 x the 50th fastest of
  60 latencies, digest 1.10), and the simulator's arrival count (`run.max_client_updates`) also
  counts the discarded over-selected stragglers, which would end those runs after about 1,667
  rounds. FedBuff runs `run.max_client_updates = client_updates` (every arrival is aggregated).
* Hyperparameters: the paper's EMNIST column of Tables 10-19, see `HYPERPARAMETERS`. Not stated
  and chosen here: uniform weighting of client deltas (the paper's update is (eta_g / B) times
  the unweighted sum); FedBuff without staleness weighting (Sec. 2.1: "FedBuff eschews
  down-weighting"), its buffer averaged over K; FedBuff + EMA + Adam uses FedAdam's Table 11
  server Adam (eta_g = 0.003, eps = 1e-4) with FedBuff's client learning rate (Tables 12-13);
  distillation temperature 1; the proximal term is (nu / 2) ||w - w_start||^2; over-selection
  B_t = round(1.2 B) (Table 10: 60/50, 24/20, 120/100). FARe-DUST and FeAST-on-MSG keep the
  simulator's defaults for what the tables do not give (`FareDustSettings`: teacher step
  eta_g = the FedAdam server learning rate, no distillation before the first delta is kept;
  `FeastSettings`: a round's window closes when all its stragglers reported, within tau_max).
* Statistics: median and the 5th-95th percentile interval of the per-seed values (numpy's
  linear interpolation), for the paper's "median and 90% CI values from 10 trials".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import ml_collections
import numpy as np

from experiments import agreement
from experiments.sweep import (
  check_choice,
  markdown_table,
  set_existing,
  write_results,
  write_text,
)
from fedsim_jax.algorithms.base import KWARGS_PREFIX
from fedsim_jax.config import ConfigError, base_config

ALGORITHMS = (
  'fedavg',
  'fedavg_overselection',
  'fedavg_time_limited',
  'fedadam',
  'fedadam_overselection',
  'fedbuff',
  'fedbuff_ema',
  'fedbuff_kd',
  'fedbuff_l2',
  'fedbuff_adam',
  'fare_dust',
  'feast_msg',
)
LATENCY_MODELS = ('per_example', 'per_domain_per_example')
DATASETS = ('mnist', 'fashion_mnist', 'emnist', 'digits')  # digits: scikit-learn's, smoke tests
# Datasets split by their own client ids (EMNIST's writers, a converted TFF fed_emnist data
# dir); the others by a Dirichlet label split.
NATURAL_DATASETS = ('emnist',)
MODELS = ('emnist_cnn', 'mlp')

# The simulator's algorithm behind each row.
SIMULATOR_ALGORITHM = {
  'fedavg': 'fedavg',
  'fedavg_overselection': 'fedavg',
  'fedavg_time_limited': 'fedavg',
  'fedadam': 'fedadam',
  'fedadam_overselection': 'fedadam',
  'fedbuff': 'fedbuff',
  'fedbuff_ema': 'fedbuff',
  'fedbuff_kd': 'fedbuff',
  'fedbuff_l2': 'fedbuff',
  'fedbuff_adam': 'fedbuff',
  'fare_dust': 'fare_dust',
  'feast_msg': 'feast_msg',
}
ASYNCHRONOUS = ('fedbuff', 'fedbuff_ema', 'fedbuff_kd', 'fedbuff_l2', 'fedbuff_adam')
OVERSELECTED = ('fedavg_overselection', 'fedadam_overselection', 'fare_dust', 'feast_msg')

DISPLAY_NAMES = {
  'fedavg': 'FedAvg',
  'fedavg_overselection': 'FedAvg + over-sel.',
  'fedavg_time_limited': 'FedAvg + time limit',
  'fedadam': 'FedAdam',
  'fedadam_overselection': 'FedAdam + over-sel.',
  'fedbuff': 'FedBuff',
  'fedbuff_ema': 'FedBuff + EMA',
  'fedbuff_kd': 'FedBuff + KD reg.',
  'fedbuff_l2': 'FedBuff + L2 reg.',
  'fedbuff_adam': 'FedBuff + EMA + Adam',
  'fare_dust': 'FARe-DUST',
  'feast_msg': 'FeAST-on-MSG',
}
LATENCY_NAMES = {'per_example': 'per-example', 'per_domain_per_example': 'per-domain per-example'}

# Task (Sec. 4.1, Table 6) and its offline stand-in (module docstring).
STRAGGLER_CLASSES = (0, 1, 2, 3, 4)
PAPER_NUM_CLIENTS = 3400
PAPER_NUM_STRAGGLERS = 800
DEFAULT_NUM_CLIENTS = 300
DEFAULT_CONCENTRATION = 1.0
PARTITION_SEED = 0
PAPER_CLIENT_UPDATES = 100_000  # Sec. 4.1: EMNIST budget (2,000 rounds x 50)
COHORT_SIZE = 50  # Table 10: B
OVERSELECTION_FACTOR = 1.2  # Table 10: B_t / B = 60 / 50
BATCH_SIZE = 20  # Table 10
LOCAL_EPOCHS = 1.0  # Table 10
TIME_LIMIT_PERCENTILE = 75.0  # Sec. 2.1: population-wide p75 of one epoch's compute
DEFAULT_EVAL_EVERY_UPDATES = 1000  # evaluations every ~1,000 client updates (100 per run)


def _kwargs(**settings: Any) -> dict[str, Any]:
  """Algorithm settings as dotted config paths `algorithm.kwargs.<field>`."""
  return {KWARGS_PREFIX + name: value for name, value in settings.items()}


# Hyperparameters: the paper's EMNIST defaults, as dotted config paths (`client.learning_rate`
# and `algorithm.kwargs.<field>`, only fields of the row's algorithm), per latency model
# (Tables 12-15, 17 and 19 are per model; 10, 11 and 16 apply to both).
#
# | row                    | client lr | server                       | other                      |
# |------------------------|-----------|------------------------------|----------------------------|
# | FedAvg (Table 10)      | 0.1       | SGD 1.0                      | B 50 (B_t 60 over-sel.)    |
# | FedAdam (Table 11)     | 0.03      | Adam 0.003, 0.9/0.99, 1e-4   | B 50 (B_t 60 over-sel.)    |
# | FedBuff (Tables 12/13) | 0.1/0.01  | SGD 1.0                      | K 20, chi 100/200          |
# | + EMA (Tables 14/15)   |           |                              | beta 0.99                  |
# | + KD reg.              |           |                              | rho 0.1/0.05               |
# | + L2 reg.              |           |                              | nu 0.5/0.05                |
# | + EMA + Adam           |           | FedAdam's Adam (not stated)  | beta 0.99                  |
# | FARe-DUST (16/17)      | 0.03      | FedAdam's (App. G.3)         | k 50, beta 0.99, rho 0.1   |
# | FeAST-on-MSG (18/19)   | 0.1       | SGD eta_g 0.006              | beta 0.95/0.99, kappa      |
# |                        |           |                              | 0/0.9, tau_max 100,000 s   |
# ("a/b": per-example / per-domain per-example.)
# FedAvg and FedAdam take their server optimizer from the algorithm's name; FedBuff and
# FARe-DUST from `server_optimizer`.
_FEDAVG = {'client.learning_rate': 0.1, **_kwargs(server_learning_rate=1.0)}
_SERVER_ADAM = _kwargs(server_learning_rate=0.003, b1=0.9, b2=0.99, eps=1e-4)
_FEDADAM = {'client.learning_rate': 0.03, **_SERVER_ADAM}
_FEDBUFF = {
  'per_example': {
    'client.learning_rate': 0.1,
    **_kwargs(server_optimizer='sgd', server_learning_rate=1.0, buffer_size=20, concurrency=100),
  },
  'per_domain_per_example': {
    'client.learning_rate': 0.01,
    **_kwargs(server_optimizer='sgd', server_learning_rate=1.0, buffer_size=20, concurrency=200),
  },
}
_FEDBUFF_EMA = 0.99  # Tables 14, 15
_FEDBUFF_KD = {'per_example': 0.1, 'per_domain_per_example': 0.05}  # Tables 14, 15
_FEDBUFF_L2 = {'per_example': 0.5, 'per_domain_per_example': 0.05}  # Tables 14, 15
# Tables 16, 17 (k, beta, rho); server optimizer: App. G.3 ("in conjunction with FedAdam").
FARE_DUST = {'history_length': 50, 'ema_decay': 0.99, 'rho': 0.1, 'server_optimizer': 'adam'}
FEAST = {  # Tables 18, 19; tau_max: App. G.4 ("100,000 s for all experiments")
  'per_example': {
    'server_learning_rate': 0.006,
    'ema_decay': 0.95,
    'kappa': 0.0,
    'tau_max': 100_000.0,
  },
  'per_domain_per_example': {
    'server_learning_rate': 0.006,
    'ema_decay': 0.99,
    'kappa': 0.9,
    'tau_max': 100_000.0,
  },
}


def fare_dust_settings(latency: str) -> dict[str, Any]:
  """FARe-DUST's settings (Tables 16-17, identical for both latency models) on the FedAdam
  defaults (App. G.3), as dotted config paths."""
  del latency
  return {**_FEDADAM, **_kwargs(**FARE_DUST)}


def feast_msg_settings(latency: str) -> dict[str, Any]:
  """FeAST-on-MSG's settings (Tables 18-19) on the FedAvg defaults (App. G.4), as dotted config
  paths."""
  return {**_FEDAVG, **_kwargs(**FEAST[latency])}


def _settings(algorithm: str, latency: str) -> dict[str, Any]:
  """The dotted-path settings of one row of the table above."""
  if algorithm in ('fedavg', 'fedavg_overselection', 'fedavg_time_limited'):
    return dict(_FEDAVG)
  if algorithm in ('fedadam', 'fedadam_overselection'):
    return dict(_FEDADAM)
  if algorithm == 'fare_dust':
    return fare_dust_settings(latency)
  if algorithm == 'feast_msg':
    return feast_msg_settings(latency)
  settings = dict(_FEDBUFF[latency])
  if algorithm in ('fedbuff_ema', 'fedbuff_adam'):
    settings.update(_kwargs(ema_decay=_FEDBUFF_EMA))
  if algorithm == 'fedbuff_adam':
    settings.update({**_SERVER_ADAM, **_kwargs(server_optimizer='adam')})
  if algorithm == 'fedbuff_kd':
    settings.update(_kwargs(distillation_strength=_FEDBUFF_KD[latency]))
  if algorithm == 'fedbuff_l2':
    settings.update(_kwargs(proximal_strength=_FEDBUFF_L2[latency]))
  return settings


# {algorithm: {latency model: {dotted config path: value}}}.
HYPERPARAMETERS: dict[str, dict[str, dict[str, Any]]] = {
  algorithm: {latency: _settings(algorithm, latency) for latency in LATENCY_MODELS}
  for algorithm in ALGORITHMS
}


# ------------------------------------------------------------------------------------------------
# The paper's numbers.


class PaperRow(NamedTuple):
  """One row of Tables 20-25: accuracies in % as (median, interval low, interval high)."""

  straggler: tuple[float, float, float]
  total: tuple[float, float, float]
  time: float


# Table 20 (EMNIST, per-example) and Table 21 (EMNIST, per-domain per-example), App. H, as
# printed: median, 90% CI (the header says 95%, the caption 90%), total training time [s].
_TABLE_20 = """
| FedAdam + over-sel. | 81.3% | [79.6%, 82.2%] | 85.4% | [85.2%, 85.7%] | 221,268 |
| FeAST-on-MSG | 81.0% | [78.5%, 84.8%] | 85.2% | [84.4%, 87.7%] | 184,630 |
| FedAdam | 79.1% | [76.6%, 80.1%] | 85.3% | [84.9%, 85.6%] | 475,782 |
| FedBuff + EMA + Adam | 77.8% | [75.9%, 84.4%] | 84.2% | [83.3%, 84.9%] | 90,534 |
| FARe-DUST | 77.5% | [74.4%, 78.6%] | 85.3% | [84.7%, 85.4%] | 221,166 |
| FedAvg + over-sel. | 72.3% | [71.2%, 73.1%] | 83.3% | [83.0%, 83.4%] | 222,279 |
| FedAvg + time limit | 71.8% | [70.8%, 72.5%] | 83.2% | [83.0%, 83.3%] | 173,012 |
| FedAvg | 71.1% | [70.5%, 71.6%] | 83.2% | [83.1%, 83.3%] | 479,538 |
| FedBuff + L2 reg. | 69.0% | [67.7%, 69.8%] | 83.2% | [82.8%, 83.5%] | 90,547 |
| FedBuff + EMA | 68.9% | [67.2%, 69.6%] | 82.8% | [82.3%, 83.0%] | 72,554 |
| FedBuff + KD reg. | 68.6% | [67.6%, 69.6%] | 82.9% | [82.5%, 83.1%] | 90,503 |
| FedBuff | 61.2% | [52.5%, 79.6%] | 79.7% | [77.3%, 84.3%] | 72,480 |
"""
_TABLE_21 = """
| FeAST-on-MSG | 99.2% | [98.9%, 99.4%] | 65.2% | [61.8%, 70.6%] | 184,565 |
| FARe-DUST | 91.7% | [91.0%, 92.5%] | 87.0% | [86.9%, 87.2%] | 267,541 |
| FedBuff | 82.0% | [65.2%, 88.5%] | 84.6% | [81.6%, 85.8%] | 81,798 |
| FedAdam | 79.8% | [77.8%, 81.1%] | 85.4% | [85.1%, 85.7%] | 771,556 |
| FedBuff + EMA + Adam | 79.4% | [76.5%, 84.5%] | 84.3% | [84.1%, 85.1%] | 102,138 |
| FedAvg | 70.8% | [70.3%, 71.2%] | 83.2% | [83.0%, 83.2%] | 779,631 |
| FedBuff + EMA | 69.5% | [68.4%, 70.2%] | 83.4% | [83.1%, 83.6%] | 81,902 |
| FedBuff + KD reg. | 69.1% | [68.3%, 69.8%] | 83.4% | [83.2%, 83.6%] | 102,150 |
| FedBuff + L2 reg. | 68.9% | [68.1%, 70.0%] | 83.4% | [83.1%, 83.6%] | 102,115 |
| FedAvg + time limit | 57.8% | [57.3%, 58.2%] | 77.9% | [77.8%, 78.0%] | 171,958 |
| FedAdam + over-sel. | 55.8% | [54.2%, 57.8%] | 80.2% | [79.9%, 80.8%] | 267,422 |
| FedAvg + over-sel. | 53.2% | [52.0%, 54.2%] | 79.0% | [78.6%, 79.2%] | 269,295 |
"""
_ROW_KEYS = {name: algorithm for algorithm, name in DISPLAY_NAMES.items()}


def _percent(text: str) -> float:
  return float(text.strip().rstrip('%'))


def _median_interval(median: str, interval: str) -> tuple[float, float, float]:
  low, high = interval.strip().strip('[]').split(',')
  return (_percent(median), _percent(low), _percent(high))


def _parse_results(text: str) -> dict[str, PaperRow]:
  """Rows `| name | median% | [lo%, hi%] | median% | [lo%, hi%] | time |` -> {algorithm: row}."""
  rows = {}
  for line in text.strip().splitlines():
    cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
    if len(cells) != 6:
      raise AssertionError(f'transcription error in row {cells[0]!r}')
    rows[_ROW_KEYS[cells[0]]] = PaperRow(
      _median_interval(cells[1], cells[2]),
      _median_interval(cells[3], cells[4]),
      float(cells[5].replace(',', '')),
    )
  return rows


PAPER_RESULTS: dict[str, dict[str, PaperRow]] = {
  'per_example': _parse_results(_TABLE_20),
  'per_domain_per_example': _parse_results(_TABLE_21),
}

# CIFAR-100-shaped synchronous round times implied by the paper (Sec. 4.1 / Table 6: 500
# clients x 100 examples, 125 stragglers; Table 10: B = 20, B_t = 24; budget 80,000 client
# updates = 4,000 rounds): total time of Table 22 (per-example) or Table 23 (per-domain) divided
# by 4,000 rounds, a mean round time. Keyed (latency model, B_t) with B = 20.
CIFAR_NUM_CLIENTS = 500
CIFAR_EXAMPLES = 100
CIFAR_NUM_STRAGGLERS = 125
CIFAR_COHORT = 20
CIFAR_OVERSELECTED = 24
CIFAR_ROUNDS = 4000
PAPER_ROUND_TIMES: dict[tuple[str, int], tuple[float, str]] = {
  ('per_example', CIFAR_COHORT): (638_038 / CIFAR_ROUNDS, 'Table 22, FedAvg: 638,038 s'),
  ('per_example', CIFAR_OVERSELECTED): (
    343_386 / CIFAR_ROUNDS,
    'Table 22, FedAvg + over-sel.: 343,386 s',
  ),
  ('per_domain_per_example', CIFAR_COHORT): (
    1_004_752 / CIFAR_ROUNDS,
    'Table 23, FedAvg: 1,004,752 s',
  ),
  ('per_domain_per_example', CIFAR_OVERSELECTED): (
    443_618 / CIFAR_ROUNDS,
    'Table 23, FedAvg + over-sel.: 443,618 s',
  ),
}

# Table 7 (= Table 3): one-epoch client latency percentiles (50, 95, 99) on EMNIST, seconds.
PAPER_TABLE_7: dict[tuple[str, str], tuple[float, float, float]] = {
  ('per_example', 'standard'): (69.89, 151.7, 223.4),
  ('per_example', 'straggler'): (77.14, 160.5, 223.8),
  ('per_domain_per_example', 'standard'): (59.35, 117.3, 194.3),
  ('per_domain_per_example', 'straggler'): (151.5, 323.8, 472.0),
}


# Table 8 (App. F): the same on CIFAR-100 (500 clients x 100 examples, 125 stragglers).
PAPER_TABLE_8: dict[tuple[str, str], tuple[float, float, float]] = {
  ('per_example', 'standard'): (60.21, 117.9, 193.5),
  ('per_example', 'straggler'): (60.21, 117.1, 204.7),
  ('per_domain_per_example', 'standard'): (52.04, 111.2, 154.6),
  ('per_domain_per_example', 'straggler'): (114.2, 259.9, 450.6),
}
LATENCY_PERCENTILES = (50, 95, 99)


# ------------------------------------------------------------------------------------------------
# Configs.


def default_num_stragglers(num_clients: int) -> int:
  """The paper's straggler share (800 of 3,400 EMNIST clients) of `num_clients`, at least 1."""
  return max(1, round(num_clients * PAPER_NUM_STRAGGLERS / PAPER_NUM_CLIENTS))


def num_selected(cohort_size: int) -> int:
  """Over-selection B_t = round(1.2 B) (Table 10)."""
  return int(round(OVERSELECTION_FACTOR * cohort_size))


def make_config(
  algorithm: str,
  latency: str,
  *,
  seed: int = 0,
  data_dir: str | None = None,
  dataset: str = 'mnist',
  model: str = 'emnist_cnn',
  num_clients: int = DEFAULT_NUM_CLIENTS,
  num_stragglers: int | None = None,
  concentration: float = DEFAULT_CONCENTRATION,
  client_updates: int = PAPER_CLIENT_UPDATES,
  cohort_size: int = COHORT_SIZE,
  buffer_size: int | None = None,
  concurrency: int | None = None,
  eval_every_updates: int = DEFAULT_EVAL_EVERY_UPDATES,
) -> ml_collections.ConfigDict:
  """One run of the paper's EMNIST experiment (Tables 20-21) on the offline stand-in task.

  Args:
    algorithm: one of `ALGORITHMS`.
    latency: one of `LATENCY_MODELS` (the `lognormal` latency model, Tables 1 and 2).
    seed: run seed (initialisation, client sampling, latency draws); the partition uses
      `PARTITION_SEED`.
    data_dir: prepared-datasets directory; None: the library default.
    dataset: one of `DATASETS`; those of `NATURAL_DATASETS` (EMNIST, where a data dir
      converted from TFF's fed_emnist is prepared) use their writer partition and ignore
      `concentration`.
    model: 'emnist_cnn' (the paper's) or 'mlp' (a cheap stand-in).
    num_clients: federation size.
    num_stragglers: straggler clients; None: `default_num_stragglers(num_clients)`.
    concentration: Dirichlet alpha of the base split.
    client_updates: the budget in client updates (the paper: 100,000).
    cohort_size: B (the paper: 50); over-selection uses round(1.2 B).
    buffer_size: FedBuff's K; None: the paper's 20 (Tables 12-13).
    concurrency: FedBuff's chi; None: the paper's 100 / 200 (Tables 12-13).
    eval_every_updates: client updates between evaluations (rounded to server versions).

  Raises:
    ConfigError: an unknown choice or an out-of-range value.
  """
  check_choice('algorithm', algorithm, ALGORITHMS)
  check_choice('latency', latency, LATENCY_MODELS)
  check_choice('dataset', dataset, DATASETS)
  check_choice('model', model, MODELS)
  num_stragglers = default_num_stragglers(num_clients) if num_stragglers is None else num_stragglers
  if not 1 <= num_stragglers < num_clients:
    raise ConfigError(
      f'num_stragglers={num_stragglers!r} is invalid; allowed values: '
      f'1..{num_clients - 1} (num_clients - 1)'
    )
  if client_updates < cohort_size:
    raise ConfigError(
      f'client_updates={client_updates!r} is invalid; allowed values: an '
      f'integer >= cohort_size ({cohort_size})'
    )
  c = base_config()
  c.seed = seed
  c.algorithm.name = SIMULATOR_ALGORITHM[algorithm]
  c.data.name = dataset
  c.data.data_dir = data_dir
  c.data.num_clients = num_clients
  if dataset in NATURAL_DATASETS:
    # The paper's task itself: one client per writer (num_clients only bounds the cohort and
    # concurrency checks), every writer kept.
    c.partition.name = 'natural'
    c.partition.kwargs.min_client_size = 1
  else:
    c.partition.name = 'dirichlet'
    c.partition.kwargs.concentration = concentration
  c.data.partition_seed = PARTITION_SEED
  c.data.straggler_classes = STRAGGLER_CLASSES
  c.data.num_stragglers = num_stragglers
  c.model.name = model
  c.client.optimizer = 'sgd'
  c.client.batch_size = BATCH_SIZE
  c.client.local_steps = None
  c.client.local_epochs = LOCAL_EPOCHS
  c.latency.name = 'lognormal'
  c.latency.kwargs.model = latency
  c.run.eval_class_groups.straggler = STRAGGLER_CLASSES
  kwargs = c.algorithm.kwargs
  kwargs.weighting = 'uniform'
  for path, value in HYPERPARAMETERS[algorithm][latency].items():
    set_existing(c, path, value)
  if algorithm in OVERSELECTED:
    kwargs.num_selected = num_selected(cohort_size)
  if algorithm == 'fedavg_time_limited':
    c.client.local_epochs = None  # as many steps as fit in the limit (Sec. 2.1)
    kwargs.time_limit_percentile = TIME_LIMIT_PERCENTILE
  if algorithm in ASYNCHRONOUS:
    kwargs.staleness = 'constant'
    kwargs.normalization = 'count'
    if buffer_size is not None:
      kwargs.buffer_size = buffer_size
    if concurrency is not None:
      kwargs.concurrency = concurrency
    c.run.num_rounds = None
    c.run.max_client_updates = client_updates
    updates_per_version = kwargs.buffer_size
  else:
    kwargs.cohort_size = cohort_size
    c.run.num_rounds = client_updates // cohort_size
    updates_per_version = cohort_size
  c.run.eval_every = max(1, round(eval_every_updates / updates_per_version))
  return c


# ------------------------------------------------------------------------------------------------
# Round times from the latency model alone.


def synchronous_round_times(
  latency: str,
  *,
  num_clients: int,
  examples_per_client: int,
  cohort_size: int,
  num_selected: int | None = None,
  num_stragglers: int = 0,
  num_rounds: int,
  seed: int,
  batch_size: int = BATCH_SIZE,
  params: Any = None,
) -> np.ndarray:
  """Simulated synchronous round times `[num_rounds]` without training (digest 1.6, 1.10).

  Each round samples `num_selected` (B_t; None: `cohort_size`) of `num_clients` clients
  uniformly without replacement, draws each one's one-epoch latency from the log-normal model
  exactly as the simulation does (`make_latency('lognormal')`: ceil(N / batch) steps of
  min(batch, N) examples), and ends when the `cohort_size`-th fastest (B-th) has reported: the
  max over the cohort without over-selection. Rounds are independent (a client still computing
  for an earlier round may be sampled; the simulation excludes it, a small effect).

  Args:
    latency: one of `LATENCY_MODELS`.
    num_clients, examples_per_client: every client holds the same number of examples.
    cohort_size, num_selected: B and B_t.
    num_stragglers: clients 0..num_stragglers-1 are stragglers (they use Table 2's slower
      parameters under `per_domain_per_example`; labels only under `per_example`).
    num_rounds: rounds to simulate.
    seed: seed of the generator for cohorts and latencies.
    batch_size: local batch size.
    params: (mu, sigma) overrides of the paper's tables (`straggler.resolve_params`).
  """
  from fedsim_jax.runtime.latency.registry import make_latency

  num_selected = cohort_size if num_selected is None else num_selected
  if not 1 <= cohort_size <= num_selected <= num_clients:
    raise ValueError(
      f'cohort_size={cohort_size}, num_selected={num_selected}; allowed: '
      f'1 <= cohort_size <= num_selected <= num_clients ({num_clients})'
    )
  if not 0 <= num_stragglers <= num_clients:
    raise ValueError(f'num_stragglers={num_stragglers}; allowed: 0..{num_clients}')
  rng = np.random.default_rng(seed)
  mask = np.arange(num_clients) < num_stragglers
  sizes = np.full(num_clients, examples_per_client, np.int64)
  settings = {'model': latency} if params is None else {'model': latency, 'params': params}
  model = make_latency(
    'lognormal',
    num_clients=num_clients,
    rng=rng,
    client_sizes=sizes,
    batch_size=batch_size,
    model_bytes=0,
    straggler_mask=mask,
    **settings,
  )
  steps = -(-examples_per_client // batch_size)
  cohorts = np.argsort(rng.random((num_rounds, num_clients)), axis=1)[:, :num_selected]
  draws = model.sample_many(cohorts.ravel())
  times = (draws.communication + draws.overhead + draws.per_step * steps).reshape(
    num_rounds, num_selected
  )
  return np.sort(times, axis=1)[:, cohort_size - 1]


def round_time_table(num_rounds: int = 10_000, seed: int = 0) -> str:
  """Markdown table: the CIFAR-100-shaped synchronous round time (500 clients x 100 examples,
  cohort 20, without and with over-selection to 24) under both latency models, simulated median
  and mean beside the paper's implied mean (`PAPER_ROUND_TIMES`)."""
  rows = []
  for latency in LATENCY_MODELS:
    for selected in (CIFAR_COHORT, CIFAR_OVERSELECTED):
      times = synchronous_round_times(
        latency,
        num_clients=CIFAR_NUM_CLIENTS,
        examples_per_client=CIFAR_EXAMPLES,
        cohort_size=CIFAR_COHORT,
        num_selected=selected,
        num_stragglers=CIFAR_NUM_STRAGGLERS if latency != 'per_example' else 0,
        num_rounds=num_rounds,
        seed=seed,
      )
      paper, source = PAPER_ROUND_TIMES[(latency, selected)]
      mean = float(np.mean(times))
      rows.append(
        [
          LATENCY_NAMES[latency],
          f'{CIFAR_COHORT} of {selected}',
          f'{float(np.median(times)):.1f}',
          f'{mean:.1f}',
          f'{paper:.1f}',
          f'{100 * (mean / paper - 1):+.1f}%',
          f'{source} / {CIFAR_ROUNDS:,} rounds',
        ]
      )
  return markdown_table(
    [
      'Latency model',
      'B of B_t',
      'Simulated median [s]',
      'Simulated mean [s]',
      'Paper (implied mean) [s]',
      'Mean vs paper',
      'Paper source',
    ],
    rows,
  )


def round_time_report(num_rounds: int = 10_000, seed: int = 0) -> str:
  """Markdown: `round_time_table` after a paragraph saying what it is."""
  return (
    f'Round time = the B-th fastest of B_t one-epoch client latencies, {num_rounds:,} '
    f'simulated rounds (seed {seed}), {CIFAR_NUM_CLIENTS} clients x {CIFAR_EXAMPLES} '
    f'examples, batch {BATCH_SIZE}, {CIFAR_NUM_STRAGGLERS} stragglers under per-domain '
    'per-example. The paper reports only total times; divided by its 4,000 rounds '
    '(80,000 client updates / 20, Sec. 4.1) they give a mean round time, so compare the '
    'mean; the median is lower because round times are right-skewed.\n\n'
    + round_time_table(num_rounds, seed)
  )


def latency_percentiles(
  client_sizes: np.ndarray,
  straggler_mask: np.ndarray,
  latency: str,
  seed: int,
  draws_per_client: int = 100,
  batch_size: int = BATCH_SIZE,
) -> dict[str, tuple[float, float, float]]:
  """One-epoch latency percentiles (50, 95, 99) per group ('standard', 'straggler') of a
  federation, drawn as the simulation draws them (Table 7's statistic)."""
  from fedsim_jax.runtime.latency.registry import make_latency

  sizes = np.maximum(np.asarray(client_sizes, np.int64), 1)
  model = make_latency(
    'lognormal',
    num_clients=len(sizes),
    rng=np.random.default_rng(seed),
    client_sizes=sizes,
    batch_size=batch_size,
    model_bytes=0,
    straggler_mask=np.asarray(straggler_mask, bool),
    model=latency,
  )
  ids = np.repeat(np.arange(len(sizes)), draws_per_client)
  draws = model.sample_many(ids)
  steps = -(-sizes[ids] // batch_size)
  times = draws.communication + draws.overhead + draws.per_step * steps
  groups = np.asarray(straggler_mask, bool)[ids]
  return {
    group: tuple(float(v) for v in np.percentile(times[groups == flag], [50, 95, 99]))
    for group, flag in (('standard', False), ('straggler', True))
    if np.any(groups == flag)
  }


def latency_table(stats: Mapping[str, Mapping[str, tuple[float, float, float]]]) -> str:
  """Markdown: {latency: {group: (p50, p95, p99)}} beside Table 7 (EMNIST)."""
  rows = []
  for latency in LATENCY_MODELS:
    for group in ('standard', 'straggler'):
      ours = stats.get(latency, {}).get(group)
      if ours is None:
        continue
      paper = PAPER_TABLE_7[(latency, group)]
      rows.append(
        [LATENCY_NAMES[latency], group] + [f'{o:.1f} ({p:g})' for o, p in zip(ours, paper)]
      )
  return markdown_table(['Latency model', 'Clients', '50% [s]', '95% [s]', '99% [s]'], rows)


# ------------------------------------------------------------------------------------------------
# Result tables.


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
  """(median, 5th percentile, 95th percentile) of `values` (numpy's linear interpolation): the
  median and 90% interval over trials."""
  if not values:
    raise ValueError('median_interval of no values')
  low, median, high = np.percentile(np.asarray(values, float), [5, 50, 95])
  return float(median), float(low), float(high)


def _format_percent(stats: tuple[float, float, float]) -> str:
  return f'{stats[0]:.1f}% [{stats[1]:.1f}%, {stats[2]:.1f}%]'


def _format_time(stats: tuple[float, float, float]) -> str:
  return f'{stats[0]:,.0f} [{stats[1]:,.0f}, {stats[2]:,.0f}]'


def _values(records: Sequence[Mapping[str, Any]], key: str, scale: float = 1.0) -> list[float]:
  return [scale * r[key] for r in records if r.get(key) is not None]


def _by_algorithm(
  records: Iterable[Mapping[str, Any]], latency: str
) -> dict[str, list[Mapping[str, Any]]]:
  grouped: dict[str, list[Mapping[str, Any]]] = {}
  for record in records:
    if record.get('latency') == latency:
      grouped.setdefault(record['algorithm'], []).append(record)
  return grouped


def results_table(records: Iterable[Mapping[str, Any]], latency: str) -> str:
  """Markdown Table 20 (per-example) or 21 (per-domain per-example) of the runs of `latency`:
  per algorithm the final straggler accuracy, total accuracy and total virtual training time,
  each median [5th, 95th percentile] over seeds, with the paper's EMNIST values beside; rows
  sorted by our median straggler accuracy, descending, as the paper's.

  A record has keys algorithm, latency, seed, straggler_accuracy and total_accuracy (fractions)
  and virtual_time (seconds).
  """
  grouped = _by_algorithm(records, latency)
  rows = []
  for algorithm, runs in grouped.items():
    straggler = _values(runs, 'straggler_accuracy', 100.0)
    total = _values(runs, 'total_accuracy', 100.0)
    times = _values(runs, 'virtual_time')
    paper = PAPER_RESULTS[latency].get(algorithm)
    ours = median_interval(straggler) if straggler else None
    cells = [
      DISPLAY_NAMES.get(algorithm, algorithm),
      _format_percent(ours) if ours else '-',
      _format_percent(paper.straggler) if paper else '-',
      _format_percent(median_interval(total)) if total else '-',
      _format_percent(paper.total) if paper else '-',
      _format_time(median_interval(times)) if times else '-',
      f'{paper.time:,.0f}' if paper else '-',
      str(len({r['seed'] for r in runs})),
    ]
    order = ALGORITHMS.index(algorithm) if algorithm in ALGORITHMS else len(ALGORITHMS)
    rows.append((-ours[0] if ours else math.inf, order, cells))
  rows.sort(key=lambda row: row[:2])
  return markdown_table(
    ['Algorithm', 'Straggler acc.', 'paper', 'Total acc.', 'paper', 'Time [s]', 'paper', 'Seeds'],
    [cells for _, _, cells in rows],
  )


def value_at(curve: Sequence[Sequence[float]], time: float, column: int) -> float | None:
  """The metric in `column` of the last evaluation at or before virtual `time` of a curve of
  rows (virtual_time, client_updates, total accuracy, straggler accuracy); None before the
  first evaluation or after the run ended (its last row is earlier than `time`)."""
  if not curve or curve[-1][0] < time:
    return None
  value = None
  for row in curve:
    if row[0] > time:
      break
    value = row[column]
  return value


def time_grid(records: Iterable[Mapping[str, Any]], points: int = 7) -> list[float]:
  """`points` virtual times, doubling up to the largest per-algorithm median total time (so the
  fast asynchronous runs and the slow synchronous ones both get resolved), 3 significant
  digits."""
  grouped: dict[str, list[float]] = {}
  for record in records:
    if record.get('virtual_time') is not None:
      grouped.setdefault(record['algorithm'], []).append(record['virtual_time'])
  if not grouped:
    return []
  end = max(float(np.median(times)) for times in grouped.values())
  return [float(f'{end / 2**k:.3g}') for k in reversed(range(points))]


_CURVE_COLUMNS = {'straggler': 3, 'total': 2}


def curves_table(
  records: Iterable[Mapping[str, Any]], latency: str, metric: str, points: int = 7
) -> str:
  """Markdown: `metric` ('straggler' or 'total' accuracy, %) against virtual time for the runs
  of `latency`: per algorithm and time, median [5th, 95th percentile] over the seeds whose run
  lasted that long; '' where fewer than half of the seeds did (the run had ended)."""
  records = [r for r in records if r.get('latency') == latency]
  grouped = _by_algorithm(records, latency)
  grid = time_grid(records, points)
  column = _CURVE_COLUMNS[metric]
  order = sorted(grouped, key=lambda a: ALGORITHMS.index(a) if a in ALGORITHMS else 99)
  rows = []
  for algorithm in order:
    runs = [r for r in grouped[algorithm] if r.get('curve')]
    cells = [DISPLAY_NAMES.get(algorithm, algorithm)]
    for time in grid:
      values = [value_at(r['curve'], time, column) for r in runs]
      values = [100.0 * v for v in values if v is not None]
      cells.append(
        _format_percent(median_interval(values)) if values and 2 * len(values) >= len(runs) else ''
      )
    rows.append(cells)
  return markdown_table(['Algorithm'] + [f't={t:,.0f}s' for t in grid], rows)


# ------------------------------------------------------------------------------------------------
# The paper's conclusions (Sec. 6, App. B, Tables 20-21), assessed by `experiments.agreement`.


class Conclusion(NamedTuple):
  """A conclusion about one latency model's table: `subject`'s `metric` minus that of `others`
  (one method, or the best / lowest / fastest of several: `combine`) lies on `side` of 0."""

  latency: str
  claim: str
  source: str
  metric: str  # 'straggler' or 'total' accuracy (percentage points), or 'time' (seconds)
  subject: str
  others: tuple[str, ...]
  combine: str  # 'max' or 'min' of the others' values ('max' for a single other too)
  side: str


_BASELINES = ASYNCHRONOUS + (
  'fedavg',
  'fedavg_overselection',
  'fedavg_time_limited',
  'fedadam',
  'fedadam_overselection',
)
_SYNCHRONOUS = tuple(a for a in ALGORITHMS if a not in ASYNCHRONOUS)
_PER_DOMAIN = 'per_domain_per_example'
_TABLE_21_SOURCE = 'Sec. 6, Table 21'


def _all_but(algorithm: str) -> tuple[str, ...]:
  return tuple(a for a in ALGORITHMS if a != algorithm)


CONCLUSIONS: tuple[Conclusion, ...] = (
  Conclusion(
    _PER_DOMAIN,
    'FARe-DUST learns more from the stragglers than the over-selecting baselines, which run '
    'the same rounds',
    _TABLE_21_SOURCE,
    'straggler',
    'fare_dust',
    ('fedavg_overselection', 'fedadam_overselection'),
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    'FARe-DUST reaches a higher straggler accuracy than every baseline',
    _TABLE_21_SOURCE,
    'straggler',
    'fare_dust',
    _BASELINES,
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    'FARe-DUST has the highest total accuracy',
    _TABLE_21_SOURCE,
    'total',
    'fare_dust',
    _all_but('fare_dust'),
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    'FeAST-on-MSG has the highest straggler accuracy',
    _TABLE_21_SOURCE,
    'straggler',
    'feast_msg',
    _all_but('feast_msg'),
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    'FeAST-on-MSG, over-tuned for straggler accuracy, has the lowest total accuracy',
    _TABLE_21_SOURCE,
    'total',
    'feast_msg',
    _all_but('feast_msg'),
    'min',
    '<',
  ),
  *(
    Conclusion(
      _PER_DOMAIN,
      f"Over-selection lowers {DISPLAY_NAMES[base]}'s {metric} accuracy",
      'Sec. 6, Table 21',
      metric,
      base,
      (f'{base}_overselection',),
      'max',
      '>',
    )
    for base in ('fedavg', 'fedadam')
    for metric in ('straggler', 'total')
  ),
  *(
    Conclusion(
      _PER_DOMAIN,
      f"Over-selection shortens {DISPLAY_NAMES[base]}'s training time",
      'Sec. 6, Table 21',
      'time',
      base,
      (f'{base}_overselection',),
      'max',
      '>',
    )
    for base in ('fedavg', 'fedadam')
  ),
  Conclusion(
    _PER_DOMAIN,
    "The time limit lowers FedAvg's straggler accuracy",
    'Sec. 6, Table 21',
    'straggler',
    'fedavg',
    ('fedavg_time_limited',),
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    "The time limit shortens FedAvg's training time",
    'Sec. 6, Table 21',
    'time',
    'fedavg',
    ('fedavg_time_limited',),
    'max',
    '>',
  ),
  Conclusion(
    _PER_DOMAIN,
    'FedBuff trains faster than every synchronous algorithm',
    'Sec. 6, Table 21',
    'time',
    'fedbuff',
    _SYNCHRONOUS,
    'min',
    '<',
  ),
  *(
    Conclusion(
      'per_example',
      f"Under the per-example model over-selection raises {DISPLAY_NAMES[base]}'s straggler "
      'accuracy',
      'Sec. 6, Table 20',
      'straggler',
      f'{base}_overselection',
      (base,),
      'max',
      '>',
    )
    for base in ('fedavg', 'fedadam')
  ),
)

_METRICS = {
  'straggler': ('straggler_accuracy', 100.0, 'straggler accuracy (pp)'),
  'total': ('total_accuracy', 100.0, 'total accuracy (pp)'),
  'time': ('virtual_time', 1.0, 'training time (s)'),
}
_COMBINED = {('max', 'straggler'): 'best', ('max', 'total'): 'best', ('min', 'total'): 'lowest'}


def _paper_value(paper: PaperRow, metric: str) -> float:
  return paper.time if metric == 'time' else getattr(paper, metric)[0]


def _others_text(conclusion: Conclusion, others: Sequence[str]) -> str:
  names = ', '.join(DISPLAY_NAMES[o] for o in others)
  if len(others) == 1:
    return names
  word = _COMBINED.get((conclusion.combine, conclusion.metric))
  if conclusion.metric == 'time':
    word = 'fastest' if conclusion.combine == 'min' else 'slowest'
  return f'the {word} of {names}'


def claims(records: Iterable[Mapping[str, Any]], latency: str) -> list[agreement.Claim]:
  """The conclusions of `CONCLUSIONS` about `latency`'s table whose methods ran: ours per seed
  (a single other method on the seeds both ran; several: those that ran on every seed of the
  subject), the paper's figure over the same methods."""
  runs = _by_algorithm(records, latency)
  paper_rows = PAPER_RESULTS[latency]
  found = []
  for conclusion in CONCLUSIONS:
    if conclusion.latency != latency or conclusion.subject not in runs:
      continue
    key, scale, unit = _METRICS[conclusion.metric]

    def per_seed(algorithm: str) -> dict[int, agreement.Value | None]:
      return {
        int(r['seed']): agreement.exact(None if r.get(key) is None else scale * r[key])
        for r in runs[algorithm]
      }

    subject = per_seed(conclusion.subject)
    others = [o for o in ALGORITHMS if o in conclusion.others and o in runs]
    if len(conclusion.others) > 1:
      others = [o for o in others if set(subject) <= {int(r['seed']) for r in runs[o]}]
    if not others:
      continue
    combine = agreement.maximum if conclusion.combine == 'max' else agreement.minimum
    ours = agreement.paired(subject, agreement.combined([per_seed(o) for o in others], combine))
    paper_subject = _paper_value(paper_rows[conclusion.subject], conclusion.metric)
    paper_others = {o: _paper_value(paper_rows[o], conclusion.metric) for o in others}
    pick = max if conclusion.combine == 'max' else min
    reference = pick(paper_others, key=paper_others.__getitem__)
    gap = paper_subject - paper_others[reference]
    if agreement.seed_side(agreement.Value(gap)) != conclusion.side:
      raise AssertionError(f"the paper's figures do not support {conclusion.claim!r}")
    digits = 0 if conclusion.metric == 'time' else 1
    fmt = (lambda v: f'{v:,.0f} s') if conclusion.metric == 'time' else (lambda v: f'{v:.1f}%')
    found.append(
      agreement.Claim(
        claim=conclusion.claim,
        source=conclusion.source,
        paper=(
          f'{DISPLAY_NAMES[conclusion.subject]} {fmt(paper_subject)} vs '
          f'{DISPLAY_NAMES[reference]} {fmt(paper_others[reference])} '
          f'({agreement.format_value(agreement.Value(gap), digits)})'
        ),
        quantity=f'{DISPLAY_NAMES[conclusion.subject]} − {_others_text(conclusion, others)}, '
        f'{unit}',
        side=conclusion.side,
        seeds=ours,
        digits=digits,
      )
    )
  return found


def agreement_table(records: Iterable[Mapping[str, Any]], latency: str) -> str:
  """Markdown: the paper's conclusions about `latency`'s table against these runs
  (`experiments.agreement`)."""
  return agreement.agreement_table(claims(list(records), latency))


def one_epoch_latencies(latency: str, seed: int) -> dict[str, np.ndarray]:
  """One CIFAR-100-shaped epoch (App. F, Table 8): one one-epoch latency per client of 500
  clients x 100 examples, batch 20, the first 125 of them stragglers, as the paper's table
  samples it ("one epoch over the dataset"); {'standard': ..., 'straggler': ...} in seconds."""
  from fedsim_jax.runtime.latency.registry import make_latency

  mask = np.arange(CIFAR_NUM_CLIENTS) < CIFAR_NUM_STRAGGLERS
  model = make_latency(
    'lognormal',
    num_clients=CIFAR_NUM_CLIENTS,
    rng=np.random.default_rng(seed),
    client_sizes=np.full(CIFAR_NUM_CLIENTS, CIFAR_EXAMPLES, np.int64),
    batch_size=BATCH_SIZE,
    model_bytes=0,
    straggler_mask=mask,
    model=latency,
  )
  draws = model.sample_many(np.arange(CIFAR_NUM_CLIENTS))
  times = draws.communication + draws.overhead + draws.per_step * (CIFAR_EXAMPLES // BATCH_SIZE)
  return {'standard': times[~mask], 'straggler': times[mask]}


def latency_claims(seeds: Sequence[int] = range(5)) -> list[agreement.Claim]:
  """App. F's statement about the per-domain per-example model on CIFAR-100 (Table 8):
  straggler clients are slower than standard clients, by 3x at the 99th percentile; ours per
  seed of one sampled epoch, at each percentile of Table 8."""
  epochs = {seed: one_epoch_latencies('per_domain_per_example', seed) for seed in seeds}
  found = []
  for index, percentile in enumerate(LATENCY_PERCENTILES):
    paper_straggler = PAPER_TABLE_8[('per_domain_per_example', 'straggler')][index]
    paper_standard = PAPER_TABLE_8[('per_domain_per_example', 'standard')][index]
    found.append(
      agreement.Claim(
        claim='Under the per-domain per-example model straggler clients are slower than '
        'standard clients ("3× slower than standard clients at the 99th percentile")',
        source='Sec. 4.2, App. F, Table 8, CIFAR-100',
        paper=f'p{percentile}: {paper_straggler:g} s vs {paper_standard:g} s '
        f'({paper_straggler / paper_standard:.1f}x)',
        quantity=f'straggler p{percentile} − standard p{percentile}, one sampled epoch (s)',
        side='>',
        seeds={
          seed: agreement.Value(
            float(
              np.percentile(epoch['straggler'], percentile)
              - np.percentile(epoch['standard'], percentile)
            )
          )
          for seed, epoch in epochs.items()
        },
        digits=1,
      )
    )
  return found


def latency_agreement() -> str:
  """Markdown: `latency_claims` (`experiments.agreement`)."""
  return agreement.agreement_table(latency_claims())


def write_outputs(
  records: Sequence[dict[str, Any]],
  settings: dict[str, Any],
  workdir: str,
  output: str,
  wall_seconds: float,
) -> None:
  """Writes `<workdir>/results.jsonl` and the markdown tables to `output`, and prints them."""
  write_results(records, workdir)
  seeds = ','.join(map(str, settings['seeds']))
  dataset = settings['dataset']
  if dataset in NATURAL_DATASETS:
    title = '# Learning from straggler clients (Hard et al.): EMNIST Tables 20-21'
    task = (
      f'{dataset} split by its writers (natural client ids); the '
      f'{settings["num_stragglers"]} writers holding most examples of classes '
      f'{list(STRAGGLER_CLASSES)} are the stragglers (the paper: 800 of 3,400, digits 0-4) '
      'and the other writers lose those classes.'
    )
  else:
    title = '# Learning from straggler clients (Hard et al.): EMNIST Tables 20-21, offline stand-in'
    task = (
      f'EMNIST is not available offline: these runs use {dataset} split over '
      f'{settings["num_clients"]} clients (Dirichlet alpha = '
      f'{settings["concentration"]:g}, partition seed {PARTITION_SEED}); the '
      f'{settings["num_stragglers"]} clients holding most examples of classes '
      f'{list(STRAGGLER_CLASSES)} are the stragglers (the paper: 800 of 3,400 EMNIST '
      'writers, digits 0-4) and the other clients lose those classes. Absolute '
      "accuracies and times are therefore not comparable with the paper's (EMNIST has "
      '62 classes); compare the orderings and the trade-offs.'
    )
  parts = [
    title,
    task,
    f'Seeds {seeds} (the paper: 10 trials); budget {settings["client_updates"]:,} client '
    f'updates (the paper: {PAPER_CLIENT_UPDATES:,}): synchronous algorithms run '
    f'{settings["client_updates"] // settings["cohort_size"]:,} rounds of B = '
    f'{settings["cohort_size"]} (B_t = {num_selected(settings["cohort_size"])} with '
    f'over-selection); model {settings["model"]}; {len(records)} runs; wall time '
    f'{wall_seconds:.0f}s.',
    "Cells: ours, then the paper's (EMNIST): final straggler accuracy (test examples of the "
    'straggler classes), final total accuracy, and total virtual training time, as median '
    '[5th, 95th percentile] over seeds (the paper: median [90% CI] over 10 trials). Rows '
    'sorted by our straggler accuracy.',
  ]
  for latency in LATENCY_MODELS:
    if not any(r.get('latency') == latency for r in records):
      continue
    table = 20 if latency == 'per_example' else 21
    parts += [
      f'## Table {table}: {LATENCY_NAMES[latency]} latency',
      results_table(records, latency),
      f'### Straggler accuracy against virtual time ({LATENCY_NAMES[latency]})',
      curves_table(records, latency, 'straggler'),
      f'### Total accuracy against virtual time ({LATENCY_NAMES[latency]})',
      curves_table(records, latency, 'total'),
    ]
  stats = settings.get('latency_stats')
  parts += [
    "## One-epoch client latency of this federation: ours (paper's Table 7, EMNIST)",
    latency_table(stats) if stats else 'Not computed (--only_existing without the data dir).',
  ]
  parts += [
    '## CIFAR-100-shaped synchronous round time (latency model only)',
    round_time_report(settings['round_time_rounds'], settings['seeds'][0]),
  ]
  text = '\n\n'.join(parts) + '\n'
  write_text(output, text)
  print(text)
