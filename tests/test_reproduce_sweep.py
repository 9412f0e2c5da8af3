"""The reproduction binaries' shared sweep pieces: flag lists, resumable runs, federation reuse."""

import json

import pytest

from fedsim_jax import experiment
from fedsim_jax.reproduce import sweep


def test_parse_list_converts_checks_and_drops_duplicates():
  assert sweep.parse_list('seeds', '2, 0,2,,1', int, lambda v: v >= 0, 'integers >= 0') == [2, 0, 1]
  assert sweep.parse_list('seeds', '', int, lambda v: v >= 0, 'integers >= 0') == []
  with pytest.raises(sweep.FlagError, match=r"--seeds='1,x': 'x' is invalid; allowed values: "
                                            r'integers >= 0'):
    sweep.parse_list('seeds', '1,x', int, lambda v: v >= 0, 'integers >= 0')
  with pytest.raises(sweep.FlagError, match="'-1' is invalid"):
    sweep.parse_list('seeds', '-1', int, lambda v: v >= 0, 'integers >= 0')


def test_parse_one_takes_exactly_one_value():
  assert sweep.parse_one('rounds', '40', int, lambda v: v >= 1, 'an integer >= 1') == 40
  for text in ('1,2', '', '0'):
    with pytest.raises(sweep.FlagError, match='--rounds='):
      sweep.parse_one('rounds', text, int, lambda v: v >= 1, 'an integer >= 1')


def test_last_federation_builds_once_per_key_and_releases_the_previous():
  built = []

  def build(name):
    built.append(name)
    return object()

  cache = sweep.LastFederation()
  a = cache.get(('class', 0), lambda: build('a'))
  assert cache.get(('class', 0), lambda: build('again')) is a
  b = cache.get(('class', 1), lambda: build('b'))
  assert b is not a and built == ['a', 'b']
  cache.get(('class', 0), lambda: build('a2'))
  assert built == ['a', 'b', 'a2']  # only the last federation is kept


def test_load_or_run_reuses_a_finished_run_and_runs_a_missing_one(tmp_path, monkeypatch):
  calls = []

  def fake_run(config, run_dir, dataset):
    calls.append((config, run_dir, dataset))
    return {'best_accuracy': 0.5}

  monkeypatch.setattr(experiment, 'run_experiment', fake_run)
  built = []
  summary, status = sweep.load_or_run(str(tmp_path / 'new'), 'cfg',
                                      lambda: built.append(1) or 'data')
  assert (summary, status) == ({'best_accuracy': 0.5}, 'ran')
  assert calls == [('cfg', str(tmp_path / 'new'), 'data')] and built == [1]

  done = tmp_path / 'done'
  done.mkdir()
  (done / 'summary.json').write_text(json.dumps({'best_accuracy': 0.9}))
  summary, status = sweep.load_or_run(str(done), 'cfg', lambda: pytest.fail('built a dataset'))
  assert (summary, status) == ({'best_accuracy': 0.9}, 'reused') and len(calls) == 1


def test_load_or_run_can_skip_missing_runs(tmp_path):
  summary, status = sweep.load_or_run(str(tmp_path / 'absent'), 'cfg',
                                      lambda: pytest.fail('built a dataset'), run_missing=False)
  assert (summary, status) == (None, 'missing')


def test_table_row_reads_a_written_table_back():
  from fedsim_jax.reproduce.fedcompass_tables import table_row
  markdown = '| Method | a | b |\n|---|---|---|\n| FedAvg | 1.00 | - |'
  assert table_row(markdown, 'FedAvg') == ['1.00', '-']
  with pytest.raises(ValueError, match="no row 'FedBuff'"):
    table_row(markdown, 'FedBuff')
