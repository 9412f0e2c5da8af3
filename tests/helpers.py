"""Configs that run in seconds, shared by the tests (also as the `tiny_config` fixture)."""

from __future__ import annotations

import json
import os
from typing import Any

import ml_collections

from fedsim_jax import algorithms
from fedsim_jax.config import base_config, set_by_path


def make_tiny_config(
  algorithm: str = 'fedavg',
  data_dir: Any = None,
  *,
  clients: int = 6,
  slots: int = 3,
  **overrides: Any,
) -> ml_collections.ConfigDict:
  """A small run of `algorithm`: `clients` clients (digits from `data_dir`, or the federation
  passed to `run_experiment`), an MLP with 16 hidden units, 3 local steps of batch 8, `slots`
  clients per round or tasks in flight (whichever the algorithm has; FedCompass gets Q in
  [2, 10] instead of local steps), 4 versions evaluated every 2. `overrides`: dotted paths."""
  config = base_config()
  config.algorithm.name = algorithm
  if data_dir is not None:
    config.data.name = 'digits'
    config.data.data_dir = str(data_dir)
  config.data.num_clients = clients
  config.model.kwargs.hidden_sizes = (16,)
  config.client.learning_rate = 0.1
  config.client.batch_size = 8
  config.client.local_steps = 3
  fields = algorithms.get_spec(algorithm).settings.field_names()
  kwargs = config.algorithm.kwargs
  for name in ('cohort_size', 'concurrency'):
    if name in fields:
      kwargs[name] = slots
  if 'buffer_size' in fields:
    kwargs.buffer_size = min(2, slots)
  if 'q_min' in fields:  # FedCompass chooses local steps itself
    config.client.local_steps = None
    kwargs.update(q_min=2, q_max=10)
  config.run.num_rounds = 4
  config.run.eval_every = 2
  for path, value in overrides.items():
    set_by_path(config, path, value)
  return config


def run_outputs(workdir: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
  """A finished run's metrics rows and summary, without the summary's host record (timings
  and the like, which differ between equal runs)."""
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    metrics = [json.loads(line) for line in f]
  with open(os.path.join(workdir, 'summary.json'), encoding='utf-8') as f:
    summary = json.load(f)
  summary.pop('host')
  return metrics, summary
