"""Config wiring of the data options: lazy federation, straggler split, budget-skewed and
natural partitions, and the extra evaluation metrics."""

import json
import os

import pytest

from fedsim_jax.config import ConfigError, base_config, set_by_path
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.experiment import (
  build_federated_dataset,
  client_budgets,
  partition_selection,
  run_experiment,
  validate,
)
from tests.helpers import make_tiny_config


def _digits_config(data_dir, **overrides):
  return make_tiny_config(
    'fedavg',
    data_dir,
    clients=10,
    slots=4,
    **{
      'partition.name': 'dirichlet',
      'partition.kwargs.min_client_size': 5,
      'client.batch_size': 32,
      'run.num_rounds': 3,
      'run.eval_every': 1,
      **overrides,
    },
  )


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_lazy_federation_run_equals_eager_run(digits_data_dir, tmp_path):
  eager = _digits_config(digits_data_dir)
  lazy = _digits_config(digits_data_dir, **{'data.lazy': True})
  assert isinstance(build_federated_dataset(lazy), LazyFederation)
  run_experiment(eager, tmp_path / 'eager')
  run_experiment(lazy, tmp_path / 'lazy')
  for a, b in zip(_metrics(tmp_path / 'eager'), _metrics(tmp_path / 'lazy'), strict=True):
    assert a['test_accuracy'] == pytest.approx(b['test_accuracy'], abs=1e-6)
    assert a['test_loss'] == pytest.approx(b['test_loss'], rel=1e-5)


def test_straggler_split_and_evaluation_groups_reach_the_metrics(digits_data_dir, tmp_path):
  config = _digits_config(
    digits_data_dir,
    **{
      'data.straggler_classes': (0, 1, 2, 3, 4),
      'data.num_stragglers': 3,
      'run.eval_balanced_accuracy': True,
      'run.eval_top_k': (3,),
    },
  )
  config.run.eval_class_groups.straggler = (0, 1, 2, 3, 4)
  dataset = build_federated_dataset(config)
  assert int(dataset.straggler_mask.sum()) == 3
  for client in range(dataset.num_clients):
    _, labels = dataset.client_examples(client)
    if not dataset.straggler_mask[client]:
      assert labels.size == 0 or labels.min() >= 5  # straggler classes removed
  run_experiment(config, tmp_path)
  row = _metrics(tmp_path)[-1]
  for key in ('test_accuracy/straggler', 'test_balanced_accuracy', 'test_top_3_accuracy'):
    assert 0.0 <= row[key] <= 1.0
  assert row['test_top_3_accuracy'] >= row['test_accuracy']


def test_budget_skewed_partition_follows_the_algorithms_budgets(digits_data_dir):
  config = _digits_config(
    digits_data_dir,
    **{'algorithm.name': 'ccfedavg', 'partition.name': 'budget_skewed', 'data.num_clients': 8},
  )
  config.partition.kwargs = {}
  dataset = build_federated_dataset(config)
  assert dataset.num_clients == 8 and dataset.client_sizes.sum() > 0
  # 'high' skew (Table IV): clients ranked by the budgets ccfedavg draws from the same seed
  # take shards from both ends of the (randomly permuted) class order, so each budget level
  # holds a contiguous block of classes: a class lies in one level or in two adjacent ones.
  budgets = client_budgets(config, partition_selection(config))()
  levels = sorted(set(budgets.tolist()))
  assert len(levels) > 2

  def levels_of_each_class(federation):
    found = {}
    for client in range(federation.num_clients):
      level = levels.index(budgets[client])
      for label in set(federation.client_examples(client)[1].tolist()):
        found.setdefault(label, set()).add(level)
    return found

  for label, where in levels_of_each_class(dataset).items():
    assert len(where) <= 2 and max(where) - min(where) <= 1, (label, where)
  # With skew 'none' the shards ignore the budgets: some class spreads further.
  config.partition.kwargs.budget_skew = 'none'
  spread = levels_of_each_class(build_federated_dataset(config)).values()
  assert any(len(where) > 2 or max(where) - min(where) > 1 for where in spread)


def test_natural_partition_needs_client_ids(digits_data_dir):
  config = _digits_config(digits_data_dir, **{'partition.name': 'natural'})
  with pytest.raises(ConfigError, match='no natural client ids'):
    build_federated_dataset(config)


@pytest.mark.parametrize(
  'key, value, message',
  [
    ('partition.kwargs.budget_skew', 'extreme', 'partition.kwargs.budget_skew'),
    ('partition.kwargs.skewed_fraction', 1.5, 'partition.kwargs.skewed_fraction'),
    ('data.num_stragglers', 3, 'needs data.straggler_classes'),
    ('run.eval_top_k', (0,), 'run.eval_top_k'),
  ],
)
def test_invalid_data_options_are_one_line_errors(key, value, message):
  config = base_config()
  config.client.local_steps = 1
  config.partition.name = 'budget_skewed'
  set_by_path(config, key, value)
  with pytest.raises(ConfigError, match=message):
    validate(config)
