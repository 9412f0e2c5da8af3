"""The runs of the privacy, robustness and compression study: settings, run grid and configs.

Three experiments on the shipped Fashion-MNIST federation (`fedsim_jax.config.
fashion_mnist_config`: 100 clients, Dirichlet(0.5) label skew, the 784-200-200-10 MLP), each
with a synchronous and an asynchronous algorithm that see the same clients and the same client
work: FedAvg with a cohort of 20, and FedBuff with 20 clients in flight and a buffer of K = 10
(staleness scaling (1 + s)^-0.5, count normalization, server SGD at 1.0). Both run the shipped
demo's client (10 local SGD steps at 0.1, batch 32) and its latency (per-step times from
N(0.1 s, (0.03 s)^2), 5% jitter); FedBuff runs twice as many server versions as FedAvg runs
rounds, so that both train the same number of client updates.

* privacy: client-level DP (`privacy.name='dp_gaussian'`, central, fixed clip norm
  `CLIP_NORM`), noise multipliers `NOISE_MULTIPLIERS`, against the non-private run.
* attacks: `ATTACKS` (sign flip with s = 3, scaling with gamma = 10) at `ATTACK_FRACTIONS`
  of the clients, and no attack, against every aggregator of `AGGREGATORS`.
* compression: `COMPRESSORS` (dense, top-1% with error feedback, QSGD with 16 levels) on a
  bandwidth-limited latency model (`device_ratio`, 100 kB/s, step times uniform in 50-250 ms),
  for a fixed virtual time `COMPRESSION_SECONDS`; time to `COMPRESSION_TARGET` accuracy.

The settings not fixed by a paper are chosen here and named: the clip norm and norm bound
(0.5, a little above the median honest update norm, ~0.4 at these client settings, measured
with adaptive clipping at quantile 0.5), trimmed mean's beta 0.2, Krum's f at the largest
value the batch allows (floor((n - 3) / 2): 8 of FedAvg's 20, 3 of FedBuff's 10), Multi-Krum
averaging n - f updates, centered clipping's radius 0.5 with 3 iterations.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import ml_collections

from fedsim_jax.config import fashion_mnist_config

EXPERIMENTS = ('privacy', 'attacks', 'compression')
ALGORITHMS = ('fedavg', 'fedbuff')
COHORT = 20  # FedAvg's cohort and FedBuff's concurrency
BUFFER = 10  # FedBuff's K
DEFAULT_ROUNDS = 60  # FedAvg rounds; FedBuff runs 2x versions
DEFAULT_EVAL_EVERY = 10  # FedAvg rounds (FedBuff: 2x versions)

CLIP_NORM = 0.5
NOISE_MULTIPLIERS = (0.3, 0.5, 1.0)

ATTACKS = {'sign_flip': {'scale': 3.0}, 'scaling': {'factor': 10.0}}
ATTACK_FRACTIONS = (0.1, 0.2)
AGGREGATORS = (
  'mean',
  'median',
  'trimmed_mean',
  'krum',
  'multi_krum',
  'norm_bounding',
  'centered_clipping',
)

COMPRESSORS = {
  'none': {},
  'top_k': {'fraction': 0.01, 'error_feedback': True},
  'qsgd': {'levels': 16},
}
BANDWIDTH = 1e5  # bytes per second, up and down
FASTEST_STEP_TIME = 0.05  # seconds
COMPRESSION_SECONDS = 3000.0
COMPRESSION_TARGET = 0.8
COMPRESSION_EVAL_EVERY = 5  # FedAvg rounds between evaluations (FedBuff: 2x versions)


def batch_size(algorithm: str) -> int:
  """Updates per aggregation: FedAvg's cohort, FedBuff's buffer."""
  return COHORT if algorithm == 'fedavg' else BUFFER


def robust_settings(name: str, algorithm: str) -> dict[str, Any]:
  """The `robust.kwargs` of aggregator `name` for `algorithm`'s batch size."""
  n = batch_size(algorithm)
  f = (n - 3) // 2  # Krum's largest f: n >= 2f + 3
  return {
    'mean': {},
    'median': {},
    'trimmed_mean': {'beta': 0.2},
    'krum': {'num_byzantine': f},
    'multi_krum': {'num_byzantine': f, 'num_selected': n - f},
    'norm_bounding': {'max_norm': CLIP_NORM},
    'centered_clipping': {'radius': CLIP_NORM, 'iterations': 3},
  }[name]


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the study, less its seed. Fields a run does not use are None."""

  experiment: str
  algorithm: str
  noise_multiplier: float | None = None  # privacy: None is the non-private run
  attack: str | None = None  # attacks: 'none' or a key of ATTACKS
  fraction: float | None = None  # attacks: share of malicious clients
  robust: str | None = None  # attacks: a name of AGGREGATORS
  compression: str | None = None  # compression: a key of COMPRESSORS

  def run_dir(self, seed: int) -> str:
    """The run's directory under the sweep's workdir. The non-private run and the unattacked
    mean run are one run (the same config), stored once under 'plain'."""
    if self.plain:
      part = 'plain'
    elif self.experiment == 'privacy':
      part = f'dp_z{self.noise_multiplier:g}'
    elif self.experiment == 'attacks':
      attack = 'no_attack' if self.attack == 'none' else f'{self.attack}_{self.fraction:g}'
      part = os.path.join(attack, str(self.robust))
    else:
      part = os.path.join('compression', str(self.compression))
    return os.path.join(self.algorithm, part, f'seed{seed}')

  @property
  def plain(self) -> bool:
    """Whether this is the run with no transform at all."""
    return (self.experiment == 'privacy' and self.noise_multiplier is None) or (
      self.experiment == 'attacks' and self.attack == 'none' and self.robust == 'mean'
    )

  def record(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def cells(
  experiment: str,
  algorithms: tuple[str, ...] = ALGORITHMS,
  noise_multipliers: tuple[float, ...] = NOISE_MULTIPLIERS,
  attacks: tuple[str, ...] = tuple(ATTACKS),
  fractions: tuple[float, ...] = ATTACK_FRACTIONS,
  aggregators: tuple[str, ...] = AGGREGATORS,
  compressors: tuple[str, ...] = tuple(COMPRESSORS),
) -> Iterator[Cell]:
  """The runs of `experiment` (less seeds), in the order a sweep runs them."""
  for algorithm in algorithms:
    if experiment == 'privacy':
      for z in (None, *noise_multipliers):
        yield Cell('privacy', algorithm, noise_multiplier=z)
    elif experiment == 'attacks':
      for robust in aggregators:
        yield Cell('attacks', algorithm, attack='none', robust=robust)
        for attack in attacks:
          for fraction in fractions:
            yield Cell('attacks', algorithm, attack=attack, fraction=fraction, robust=robust)
    else:
      for compression in compressors:
        yield Cell('compression', algorithm, compression=compression)


def make_config(
  cell: Cell,
  seed: int,
  data_dir: str | None = None,
  rounds: int = DEFAULT_ROUNDS,
  eval_every: int = DEFAULT_EVAL_EVERY,
) -> ml_collections.ConfigDict:
  """The config of one run (`rounds` and `eval_every` in FedAvg rounds; the compression runs
  are bounded by virtual time instead)."""
  if cell.algorithm == 'fedavg':
    config = fashion_mnist_config('fedavg', cohort_size=COHORT, weighting='uniform')
    scale = 1
  else:
    config = fashion_mnist_config(
      'fedbuff',
      concurrency=COHORT,
      buffer_size=BUFFER,
      weighting='uniform',
      normalization='count',
      staleness='polynomial',
      staleness_a=0.5,
      server_optimizer='sgd',
      server_learning_rate=1.0,
    )
    scale = COHORT // BUFFER
  config.seed = seed
  if data_dir is not None:
    config.data.data_dir = data_dir
  config.client.local_steps = 10
  config.client.learning_rate = 0.1
  config.latency.name = 'per_step'
  config.latency.kwargs.update(distribution='normal', mean=0.1, spread=0.3, jitter=0.05)
  config.run.num_rounds = rounds * scale
  config.run.eval_every = eval_every * scale
  config.run.tensorboard = False
  if cell.experiment == 'privacy' and cell.noise_multiplier is not None:
    config.privacy.name = 'dp_gaussian'
    config.privacy.kwargs.update(clip_norm=CLIP_NORM, noise_multiplier=cell.noise_multiplier)
  if cell.experiment == 'attacks':
    if cell.attack != 'none':
      config.attack.name = cell.attack
      config.attack.kwargs.update(dict(ATTACKS[cell.attack], fraction=cell.fraction))
    config.robust.name = cell.robust
    config.robust.kwargs.update(robust_settings(cell.robust, cell.algorithm))
  if cell.experiment == 'compression':
    config.latency.name = 'device_ratio'
    config.latency.kwargs = {'fastest_step_time': FASTEST_STEP_TIME, 'bandwidth': BANDWIDTH}
    config.run.num_rounds = None
    config.run.max_virtual_time = COMPRESSION_SECONDS
    config.run.eval_every = COMPRESSION_EVAL_EVERY * scale
    config.run.target_accuracy = COMPRESSION_TARGET
    if cell.compression != 'none':
      config.compression.name = cell.compression
      config.compression.kwargs.update(COMPRESSORS[cell.compression])
  return config
