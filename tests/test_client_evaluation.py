"""Per-client evaluation: each client's test data (held out, label-matched, natural), the
distribution figures against hand computations, the evaluator against a central evaluation of
each client's examples, personalization's degenerate case, whole runs, resume, bad settings."""

import json
import os

import numpy as np
import pytest

from fedsim_jax.build import build_federated_dataset, build_run
from fedsim_jax.config import ConfigError
from fedsim_jax.data import client_test
from fedsim_jax.experiment import run_experiment
from fedsim_jax.metrics import make_evaluator
from fedsim_jax.metrics.client_evaluation import ClientEvaluation, distribution, speed_groups
from tests.helpers import make_tiny_config
from tests.test_resume import _assert_same_run


def _parts(sizes, seed=0):
  rows = np.random.default_rng(seed).permutation(sum(sizes))
  return np.split(rows, np.cumsum(sizes)[:-1])


def test_hold_out_is_deterministic_disjoint_and_keeps_the_training_order():
  parts = _parts([10, 1, 2, 7, 0])
  train, test = client_test.hold_out(parts, 0.25, seed=3)
  again_train, again_test = client_test.hold_out(parts, 0.25, seed=3)
  other_train, _ = client_test.hold_out(parts, 0.25, seed=4)
  # floor(0.25 n), at least one when n >= 2, never all of a client's examples.
  assert [len(t) for t in test] == [2, 0, 1, 1, 0]
  for rows, kept, held in zip(parts, train, test):
    assert not set(kept) & set(held)
    assert sorted([*kept, *held]) == sorted(rows)
    np.testing.assert_array_equal(kept, [r for r in rows if r not in set(held)])  # order kept
  assert all(np.array_equal(a, b) for a, b in zip(train + test, again_train + again_test))
  assert any(not np.array_equal(a, b) for a, b in zip(train, other_train))
  with pytest.raises(ValueError, match='fraction'):
    client_test.hold_out(parts, 1.0, seed=0)


def test_largest_remainder_allocates_exactly_the_total():
  np.testing.assert_array_equal(client_test.largest_remainder([1, 1, 1], 10), [4, 3, 3])
  np.testing.assert_array_equal(client_test.largest_remainder([3, 0, 1], 6), [5, 0, 1])
  np.testing.assert_array_equal(client_test.largest_remainder([0, 0], 5), [0, 0])


def test_label_matched_draws_the_clients_label_mix_from_the_test_split():
  train_y = np.array([0] * 6 + [1] * 2 + [2] * 4)
  test_y = np.repeat(np.arange(3), 50)
  parts = [np.arange(0, 8), np.arange(8, 12), np.zeros(0, np.int64)]  # 6x0 + 2x1; 4x2; empty
  rows = client_test.label_matched(parts, train_y, test_y, 3, examples=8, seed=1)
  np.testing.assert_array_equal(np.bincount(test_y[rows[0]], minlength=3), [6, 2, 0])
  np.testing.assert_array_equal(np.bincount(test_y[rows[1]], minlength=3), [0, 0, 8])
  assert len(rows[2]) == 0 and len(set(rows[0])) == 8  # without replacement
  again = client_test.label_matched(parts, train_y, test_y, 3, examples=8, seed=1)
  assert all(np.array_equal(a, b) for a, b in zip(rows, again))


def test_natural_test_rows_are_the_clients_own():
  train_ids = np.array([7, 7, 3, 3, 3, 9])
  test_ids = np.array([3, 9, 7, 3, 5])
  parts = [np.array([0, 1]), np.array([2, 3, 4]), np.array([5])]
  rows = client_test.natural_test_rows(parts, train_ids, test_ids)
  assert [r.tolist() for r in rows] == [[2], [0, 3], [1]]


def test_distribution_figures_by_hand():
  figures = distribution(np.array([0.5, 1.0, 0.25]), np.array([2, 1, 4]))
  assert figures['client_accuracy_mean'] == pytest.approx(1.75 / 3)
  assert figures['client_accuracy_weighted'] == pytest.approx(3 / 7)  # (1 + 1 + 1) / 7
  assert figures['client_accuracy_std'] == pytest.approx(
    np.sqrt(((0.5 - 1.75 / 3) ** 2 + (1 - 1.75 / 3) ** 2 + (0.25 - 1.75 / 3) ** 2) / 3)
  )
  assert figures['client_accuracy_p10'] == pytest.approx(0.25 + 0.2 * 0.25)  # sorted 0.25, 0.5
  assert figures['client_accuracy_min'] == 0.25
  evaluation = ClientEvaluation(
    clients=np.array([0, 2, 3]),
    accuracy=np.array([0.5, 1.0, 0.25]),
    loss=np.array([1.0, 0.5, 1.5]),
    num_examples=np.array([2.0, 1.0, 4.0]),
    personalized_accuracy=np.array([1.0, 1.0, 0.5]),
    groups={
      'slow': np.array([True, False, True, True]),
      'fast': np.array([False, True, False, False]),
    },
  )
  row = evaluation.row()
  assert row['client_accuracy_mean/slow'] == pytest.approx(1.75 / 3)
  assert 'client_accuracy_mean/fast' not in row  # client 1 was not evaluated
  assert row['personalized_accuracy_mean'] == pytest.approx(2.5 / 3)
  assert row['personalized_accuracy_weighted'] == pytest.approx(5 / 7)
  assert row['client_loss_mean'] == pytest.approx(1.0) and row['clients_evaluated'] == 3


def test_speed_groups_are_thirds_by_expected_step_time():
  groups = speed_groups(np.array([0.3, 0.1, 0.2, 0.9, 0.5, 0.4]))
  assert np.flatnonzero(groups['fast']).tolist() == [1, 2]
  assert np.flatnonzero(groups['medium']).tolist() == [0, 5]
  assert np.flatnonzero(groups['slow']).tolist() == [3, 4]
  assert speed_groups(np.full(4, 0.1)) == {}


def _config(data_dir, **overrides):
  return make_tiny_config(
    'fedavg', data_dir, clients=10, slots=4, **{'data.client_test': 'held_out', **overrides}
  )


def test_held_out_examples_leave_the_training_data(digits_data_dir):
  plain = build_federated_dataset(_config(digits_data_dir, **{'data.client_test': 'none'}))
  split = build_federated_dataset(_config(digits_data_dir))
  test = split.client_test
  assert plain.client_test is None and test.source == 'held_out'
  np.testing.assert_array_equal(split.client_sizes + test.sizes, plain.client_sizes)
  for client in range(10):
    x, y = plain.client_examples(client)
    kept, _ = split.client_examples(client)
    held = test.x[test.offsets[client] : test.offsets[client + 1]]
    # Every example of the client is either still trained on or held out, not both.
    assert len(kept) + len(held) == len(x)
    combined = np.concatenate([kept, held]).reshape(len(x), -1)
    assert sorted(map(bytes, combined)) == sorted(map(bytes, x.reshape(len(x), -1)))


def test_the_evaluator_matches_a_central_evaluation_of_each_client(digits_data_dir):
  config = _config(digits_data_dir, **{'run.eval_batch_size': 16})
  built = build_run(config)
  evaluate = built.parts.client_evaluate
  params = built.parts.simulation.params
  result = evaluate(params, version=0)
  test = built.parts.dataset.client_test
  np.testing.assert_array_equal(result.clients, np.arange(10))
  for client in range(10):
    rows = slice(test.offsets[client], test.offsets[client + 1])
    central = make_evaluator(built.model, test.x[rows], test.y[rows], batch_size=7)(params)
    assert result.accuracy[client] == pytest.approx(central['accuracy'], abs=1e-6)
    assert result.loss[client] == pytest.approx(central['loss'], rel=1e-5)
    assert result.num_examples[client] == central['num_examples']


def test_a_sample_of_clients_is_fresh_each_version_and_the_same_on_a_rebuild(digits_data_dir):
  config = _config(digits_data_dir, **{'run.eval_clients': 4})
  first = build_run(config).parts.client_evaluate
  second = build_run(config).parts.client_evaluate
  samples = [first.clients(version) for version in range(5)]
  assert all(len(s) == 4 and len(set(s)) == 4 and list(s) == sorted(s) for s in samples)
  assert len({tuple(s) for s in samples}) > 1
  assert all(np.array_equal(first.clients(v), second.clients(v)) for v in range(5))


def test_personalization_with_a_vanishing_step_is_the_global_model(digits_data_dir):
  config = _config(
    digits_data_dir,
    **{'run.eval_personalization_steps': 3, 'run.eval_personalization_learning_rate': 1e-12},
  )
  built = build_run(config)
  result = built.parts.client_evaluate(built.parts.simulation.params, version=0)
  np.testing.assert_allclose(result.personalized_accuracy, result.accuracy)
  config = _config(digits_data_dir, **{'run.eval_personalization_steps': 20})
  built = build_run(config)
  tuned = built.parts.client_evaluate(built.parts.simulation.params, version=0)
  # Twenty steps on its own data lift the untrained model on (nearly) every client.
  assert tuned.personalized_accuracy.mean() > tuned.accuracy.mean() + 0.1


def test_a_run_writes_the_per_client_figures_and_resumes_bit_for_bit(digits_data_dir, tmp_path):
  extra = {'run.eval_clients': 6, 'run.eval_personalization_steps': 2, 'run.num_rounds': 6}
  summary = run_experiment(_config(digits_data_dir, **extra), tmp_path / 'reference')
  with open(tmp_path / 'reference' / 'metrics.jsonl') as f:
    rows = [json.loads(line) for line in f]
  with open(tmp_path / 'reference' / 'clients_eval.jsonl') as f:
    records = [json.loads(line) for line in f]
  assert [r['version'] for r in records] == [r['version'] for r in rows] == [0, 2, 4, 6]
  for row, record in zip(rows, records):
    assert len(record['clients']) == row['clients_evaluated'] == 6
    assert row['client_accuracy_min'] == pytest.approx(min(record['accuracy']), abs=1e-6)
    assert row['personalized_accuracy_mean'] == pytest.approx(
      np.mean(record['personalized_accuracy']), abs=1e-6
    )
  assert summary['client_evaluation']['client_accuracy_mean'] == rows[-1]['client_accuracy_mean']
  shorter = _config(digits_data_dir, **{**extra, 'run.num_rounds': 2})
  run_experiment(shorter, tmp_path / 'run')
  run_experiment(_config(digits_data_dir, **extra), tmp_path / 'run', resume=True)
  _assert_same_run(tmp_path / 'run', tmp_path / 'reference')
  with open(tmp_path / 'run' / 'clients_eval.jsonl') as f:
    assert [json.loads(line) for line in f] == records


def test_budgeted_algorithms_group_clients_by_budget(digits_data_dir):
  config = make_tiny_config(
    'ccfedavg', digits_data_dir, clients=10, slots=4, **{'data.client_test': 'held_out'}
  )
  built = build_run(config)
  groups = built.parts.client_evaluate.groups
  budgets = built.spec.algorithm.settings.client_budgets(10, built.spec.seed)
  levels = sorted(name for name in groups if name.startswith('budget_'))
  assert levels == sorted(f'budget_{p:g}' for p in set(budgets)) and len(levels) > 1
  for name in levels:
    np.testing.assert_array_equal(groups[name], budgets == float(name.split('_')[1]))
  row = built.parts.client_evaluate(built.parts.simulation.params, 0).row()
  assert all(f'client_accuracy_mean/{name}' in row for name in levels)


def test_ditto_runs_report_each_clients_own_model(digits_data_dir, tmp_path):
  config = make_tiny_config(
    'ditto', digits_data_dir, clients=10, slots=4, **{'data.client_test': 'held_out'}
  )
  run_experiment(config, tmp_path / 'ditto')
  with open(tmp_path / 'ditto' / 'metrics.jsonl') as f:
    rows = [json.loads(line) for line in f]
  with open(tmp_path / 'ditto' / 'clients_eval.jsonl') as f:
    records = [json.loads(line) for line in f]
  # Version 0: every v_k is the initial model, so each client's own model scores as the global.
  assert records[0]['personal_model_accuracy'] == records[0]['accuracy']
  assert records[-1]['personal_model_accuracy'] != records[-1]['accuracy']
  assert rows[-1]['personal_model_accuracy_mean'] == pytest.approx(
    np.mean(records[-1]['personal_model_accuracy']), abs=1e-6
  )


@pytest.mark.parametrize(
  ('overrides', 'message'),
  [
    ({'data.client_test': 'none', 'run.eval_clients': 3}, 'run.eval_clients=3 needs per-client'),
    (
      {'data.client_test': 'none', 'run.eval_personalization_steps': 2},
      'run.eval_personalization_steps=2 needs per-client',
    ),
    ({'run.eval_clients': 11}, 'eval_clients=11 is more than the 10 clients'),
    ({'data.client_test': 'natural'}, "data.client_test='natural' is invalid for dataset"),
    ({'data.client_test': 'held_out', 'data.client_test_fraction': 1.0}, 'client_test_fraction'),
    ({'data.client_test': 'heldout'}, "data.client_test='heldout'"),
    (
      {'run.eval_personalization_steps': 2, 'data.lazy': True},
      'run.eval_personalization_steps needs the federation on device',
    ),
  ],
)
def test_settings_that_do_not_fit_are_refused_with_one_line(digits_data_dir, overrides, message):
  with pytest.raises(ConfigError, match=message) as error:
    build_run(_config(digits_data_dir, **overrides))
  assert '\n' not in str(error.value)
  assert os.path.isdir(digits_data_dir)


def _fake_run(path, accuracies, personalized=None):
  path.mkdir(parents=True)
  rows, records = [], []
  for version, values in enumerate(accuracies):
    values = np.asarray(values)
    row = {'version': version, 'virtual_time': 10.0 * version, 'test_accuracy': values.mean()}
    row.update(distribution(values, np.ones(len(values))))
    record = {
      'version': version,
      'virtual_time': 10.0 * version,
      'clients': list(range(len(values))),
    }
    record['accuracy'] = values.tolist()
    if personalized is not None:
      row['personalized_accuracy_mean'] = personalized[version]
      record['personalized_accuracy'] = [personalized[version]] * len(values)
    rows.append(row)
    records.append(record)
  (path / 'config.json').write_text(json.dumps({'algorithm': {'name': 'fedavg'}, 'seed': 0}))
  (path / 'summary.json').write_text(json.dumps({'status': 'completed'}))
  for name, lines in (('metrics.jsonl', rows), ('clients_eval.jsonl', records)):
    (path / name).write_text(''.join(json.dumps(line) + '\n' for line in lines))


def test_compare_tabulates_and_plot_draws_the_per_client_figures(tmp_path, capsys):
  from fedsim_jax.analysis import compare, plot, run_files

  _fake_run(tmp_path / 'a', [[0.1, 0.2, 0.3], [0.5, 0.7, 0.9]], personalized=[0.4, 0.95])
  _fake_run(tmp_path / 'b', [[0.2, 0.2], [0.6, 0.4]])
  groups = run_files.discover([tmp_path / 'a', tmp_path / 'b'], labels=['a', 'b'])
  rows = compare.compare(groups)
  assert rows[0]['client_accuracy_min'] == pytest.approx(0.5)
  assert rows[0]['client_accuracy_p10'] == pytest.approx(0.54)  # 0.5 + 0.2 x (0.7 - 0.5)
  assert rows[0]['personalized_accuracy_mean'] == pytest.approx(0.95)
  assert rows[1]['personalized_accuracy_mean'] is None
  table = compare.format_table(rows)
  assert '| worst client | personalized mean |' in table.splitlines()[0] + ' |'
  assert '| 0.5000 | 0.9500 |' in table and '| 0.4000 | n/a |' in table
  written = plot.write_plots(groups, tmp_path / 'plots')
  assert {p.name for p in written} >= {'clients_a.png', 'clients_b.png', 'accuracy.png'}
  assert 'skipping clients' not in capsys.readouterr().err
  # A run without per-client evaluation: no clients figure, and no line about it by default.
  (tmp_path / 'b' / 'clients_eval.jsonl').unlink()
  groups = run_files.discover([tmp_path / 'b'], labels=['b'])
  written = plot.write_plots(groups, tmp_path / 'plots_b')
  assert 'clients_b.png' not in {p.name for p in written}
  assert 'skipping clients' not in capsys.readouterr().err
  plot.write_plots(groups, tmp_path / 'plots_b', kinds=['clients'])
  assert 'skipping clients of b' in capsys.readouterr().err


def test_each_batch_sums_into_its_own_consecutive_clients_and_drops_padding():
  from fedsim_jax.metrics.client_evaluation import _local_owners

  # Rows of evaluated clients 0, 0, 1, 2, 2, 2, 3 in batches of 3: the last batch is padded.
  firsts, local = _local_owners(np.array([0, 0, 1, 2, 2, 2, 3]), num_batches=3, size=3)
  np.testing.assert_array_equal(firsts, [0, 2, 3])
  # Padding rows get segment 3 (= the batch size), which segment_sum drops.
  np.testing.assert_array_equal(np.asarray(local), [[0, 0, 1], [0, 0, 0], [0, 3, 3]])
