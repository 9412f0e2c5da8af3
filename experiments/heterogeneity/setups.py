"""The runs of the heterogeneity study: the baselines FL papers compare against, measured per
client, on strongly non-IID Fashion-MNIST.

Both partitions split Fashion-MNIST's training set over 100 clients with strong label skew:
Dirichlet(0.1) (`dirichlet0.1`: most clients hold one or two classes, in very unequal amounts)
and two classes per client (`two_classes`). Every client holds out 20% of its examples as its
own test data (`data.client_test='held_out'`), and every evaluation also fine-tunes each
client for `PERSONALIZATION_STEPS` local steps (personalized accuracy).

Every method runs the same rounds: a cohort of 10 clients per round, one local epoch of SGD at
0.05 with batch 32 (so clients of different sizes run different numbers of steps, which is
what FedNova normalises), `DEFAULT_ROUNDS` rounds, the shipped demo's per-step latency (step
times from N(0.1 s, (0.03 s)^2), 5% jitter) for time to the target accuracy.

Methods (`METHODS`): FedAvg; FedProx (mu 0.01); SCAFFOLD (option II); FedNova; q-FFL's
q-FedAvg at q = 1 and q = 5; Ditto (lambda 0.1); and FedBN against FedAvg on the same model
with BatchNorm after each hidden layer. Every method uses the shipped 784-200-200-10 MLP (FedBN's
paper uses a BatchNorm CNN, `fedbn_cnn` in the zoo; its convolutions cost this study's CPU
budget several times over). Values not fixed by a paper are chosen here and
named: FedProx's mu and Ditto's lambda from the middle of their papers' grids, q-FFL's two q
from its paper's range.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import ml_collections

from fedsim_jax.config import fashion_mnist_config

PARTITIONS: dict[str, tuple[str, dict[str, Any]]] = {
  'dirichlet0.1': ('dirichlet', {'concentration': 0.1}),
  'two_classes': ('two_classes', {}),
}
# Partitions whose clients differ in size, so that one local epoch is a different number of
# steps per client (two classes per client gives every client 600 examples: equal steps, where
# FedNova is FedAvg).
UNEQUAL_STEPS = ('dirichlet0.1',)
BN_MLP = {'norm': 'batch'}  # the MLP with BatchNorm after each hidden layer

# name -> (algorithm, algorithm.kwargs, model name, model kwargs)
METHODS: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
  'fedavg': ('fedavg', {}, 'mlp', {}),
  'fedprox': ('fedprox', {'proximal_strength': 0.01}, 'mlp', {}),
  'scaffold': ('scaffold', {'weighting': 'num_examples'}, 'mlp', {}),
  'fednova': ('fednova', {}, 'mlp', {}),
  'qffl_q1': ('qffedavg', {'q': 1.0}, 'mlp', {}),
  'qffl_q5': ('qffedavg', {'q': 5.0}, 'mlp', {}),
  'ditto': ('ditto', {'strength': 0.1}, 'mlp', {}),
  'fedavg_bn': ('fedavg', {}, 'mlp', BN_MLP),
  'fedbn': ('fedbn', {}, 'mlp', BN_MLP),
}
COHORT = 10
LOCAL_EPOCHS = 1.0
DEFAULT_ROUNDS = 100
DEFAULT_EVAL_EVERY = 10
PERSONALIZATION_STEPS = 5
HELD_OUT = 0.2
TARGET_ACCURACY = 0.7


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the study, less its seed."""

  partition: str
  method: str

  def run_dir(self, seed: int) -> str:
    return os.path.join(self.partition, self.method, f'seed{seed}')

  def record(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def cells(
  partitions: tuple[str, ...] = tuple(PARTITIONS), methods: tuple[str, ...] = tuple(METHODS)
) -> list[Cell]:
  """The runs of the study (less seeds), partition by partition."""
  return [Cell(partition, method) for partition in partitions for method in methods]


def make_config(
  cell: Cell,
  seed: int,
  data_dir: str | None = None,
  rounds: int = DEFAULT_ROUNDS,
  eval_every: int = DEFAULT_EVAL_EVERY,
) -> ml_collections.ConfigDict:
  """The config of one run."""
  algorithm, kwargs, model, model_kwargs = METHODS[cell.method]
  config = fashion_mnist_config(algorithm, cohort_size=COHORT, **kwargs)
  config.seed = seed
  if data_dir is not None:
    config.data.data_dir = data_dir
  partition, partition_kwargs = PARTITIONS[cell.partition]
  config.partition.name = partition
  config.partition.kwargs = dict(partition_kwargs)
  config.model.name = model
  config.model.kwargs = dict(model_kwargs)
  config.client.local_steps = None
  config.client.local_epochs = LOCAL_EPOCHS
  config.latency.name = 'per_step'
  config.latency.kwargs.update(distribution='normal', mean=0.1, spread=0.3, jitter=0.05)
  config.data.client_test = 'held_out'
  config.data.client_test_fraction = HELD_OUT
  config.run.eval_personalization_steps = PERSONALIZATION_STEPS
  config.run.num_rounds = rounds
  config.run.eval_every = eval_every
  config.run.target_accuracy = TARGET_ACCURACY
  config.run.tensorboard = False
  return config
