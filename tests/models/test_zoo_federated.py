"""Every model of the zoo trains one federated round end to end (run_experiment, FedAvg)."""

import json

import numpy as np
import pytest

from fedsim_jax.config import base_config
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.synthetic import toy_federation, toy_text_federation
from fedsim_jax.experiment import run_experiment
from fedsim_jax.models import MODELS

IMAGE_SHAPES = {
  'mlp': (8, 8, 1),
  'mnist_cnn': (28, 28, 1),
  'lenet5': (28, 28, 1),
  'fedavg_cnn': (28, 28, 1),
  'fedasmu_cnn': (32, 32, 3),
  'emnist_cnn': (28, 28, 1),
  'resnet18': (32, 32, 3),
  'resnet20': (16, 16, 3),
  'alexnet': (32, 32, 3),
  'vgg11': (32, 32, 3),
  'fedbn_cnn': (28, 28, 1),
}
NEXT_TOKEN = ('char_lstm', 'word_lstm')
# Compiles of tens of seconds on CPU: in `make test-slow` (each model's local step and its
# parameter count stay in `make test`: tests/models/test_zoo.py).
SLOW = ('alexnet', 'fedbn_cnn', 'resnet18', 'resnet20', 'vgg11', 'word_lstm')


def _classification_text_federation(
  num_clients: int = 2, length: int = 12, vocabulary_size: int = 50
) -> FederatedDataset:
  rng = np.random.default_rng(0)
  x = rng.integers(1, vocabulary_size, (24, length)).astype(np.int32)
  y = (x[:, 0] % 2).astype(np.int32)
  parts = [np.arange(0, 8), np.arange(8, 16)][:num_clients]
  return FederatedDataset.from_partition('toy_reviews', x[:16], y[:16], parts, x[16:], y[16:], 2)


def _federation(name: str) -> FederatedDataset:
  if name in NEXT_TOKEN:
    return toy_text_federation(num_clients=2, vocabulary_size=30, length=10)
  if name == 'text_cnn':
    return _classification_text_federation()
  return toy_federation(num_clients=2, num_classes=10, image_shape=IMAGE_SHAPES[name])


@pytest.mark.parametrize(
  'name', [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in MODELS.names()]
)
def test_one_federated_round(name, tmp_path):
  config = base_config()
  config.model.name = name
  config.data.num_clients = 2
  config.client.local_steps = 1
  config.client.batch_size = 2
  config.algorithm.kwargs.cohort_size = 2
  config.run.num_rounds = 1
  config.run.eval_every = 1
  config.run.eval_batch_size = 8
  summary = run_experiment(config, tmp_path, dataset=_federation(name))
  assert summary['final_version'] == 1 and summary['client_updates'] == 2
  assert summary['gradient_steps'] == 2
  # The round trained the model: its test loss moved, and stayed finite.
  with open(tmp_path / 'metrics.jsonl') as f:
    before, after = (json.loads(line)['test_loss'] for line in f)
  assert np.isfinite(before) and np.isfinite(after) and after != before
