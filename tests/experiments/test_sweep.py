"""The reproduction binaries' shared sweep pieces: flag lists, resumable runs, federation reuse."""

import json

import pytest

from experiments import sweep
from fedsim_jax import experiment
from fedsim_jax.settings import ConfigError
from tests.helpers import make_tiny_config


def test_parse_list_converts_checks_and_drops_duplicates():
  assert sweep.parse_list('seeds', '2, 0,2,,1', int, lambda v: v >= 0, 'integers >= 0') == [2, 0, 1]
  assert sweep.parse_list('seeds', '', int, lambda v: v >= 0, 'integers >= 0') == []
  with pytest.raises(
    sweep.FlagError,
    match=r"--seeds='1,x': 'x' is invalid; allowed values: "
    r'integers >= 0',
  ):
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

  def fake_run(config, run_dir, dataset, resume):
    assert resume  # a killed run's directory continues from its checkpoint
    calls.append((config, run_dir, dataset))
    return {'best_accuracy': 0.5}

  monkeypatch.setattr(experiment, 'run_experiment', fake_run)
  built = []
  summary, status = sweep.load_or_run(
    str(tmp_path / 'new'), 'cfg', lambda: built.append(1) or 'data'
  )
  assert (summary, status) == ({'best_accuracy': 0.5}, 'ran')
  assert calls == [('cfg', str(tmp_path / 'new'), 'data')] and built == [1]

  done = tmp_path / 'done'
  done.mkdir()
  (done / 'summary.json').write_text(json.dumps({'best_accuracy': 0.9}))
  summary, status = sweep.load_or_run(str(done), 'cfg', lambda: pytest.fail('built a dataset'))
  assert (summary, status) == ({'best_accuracy': 0.9}, 'reused') and len(calls) == 1

  interrupted = tmp_path / 'interrupted'
  interrupted.mkdir()
  (interrupted / 'summary.json').write_text(json.dumps({'status': 'interrupted'}))
  summary, status = sweep.load_or_run(str(interrupted), 'cfg', lambda: 'data')
  assert (summary, status) == ({'best_accuracy': 0.5}, 'ran') and len(calls) == 2

  # A stall is the run's own result; an error in the code is not: the next sweep reruns it.
  stalled = tmp_path / 'stalled'
  stalled.mkdir()
  (stalled / 'summary.json').write_text(json.dumps({'status': 'failed', 'message': 'stalled'}))
  assert sweep.load_or_run(str(stalled), 'cfg', lambda: 'data')[1] == 'reused'
  crashed = tmp_path / 'crashed'
  crashed.mkdir()
  (crashed / 'summary.json').write_text(json.dumps({'status': 'failed', 'error': 'KeyError'}))
  summary, status = sweep.load_or_run(str(crashed), 'cfg', lambda: 'data')
  assert (summary, status) == ({'best_accuracy': 0.5}, 'ran') and len(calls) == 3


@pytest.mark.parametrize('signal_number, code', [(2, 130), (15, 143)])
def test_a_run_interrupted_by_a_signal_stops_the_sweep(
  tmp_path, monkeypatch, capsys, signal_number, code
):
  monkeypatch.setattr(
    experiment,
    'run_experiment',
    lambda *a, **k: {'status': 'interrupted', 'signal': signal_number, 'best_accuracy': 0.3},
  )
  with pytest.raises(SystemExit) as stopped:
    sweep.load_or_run(str(tmp_path / 'run'), 'cfg', lambda: 'data')
  assert stopped.value.code == code  # the shell's code for the signal, not the next run
  message = capsys.readouterr().err
  assert message.count('\n') == 1 and 'rerun the same command' in message


def test_load_or_run_can_skip_missing_runs(tmp_path):
  summary, status = sweep.load_or_run(
    str(tmp_path / 'absent'), 'cfg', lambda: pytest.fail('built a dataset'), run_missing=False
  )
  assert (summary, status) == (None, 'missing')


def test_markdown_table_and_table_row_read_it_back():
  markdown = sweep.markdown_table(['Method', 'a', 'b'], [['FedAvg', '1.00', '-']])
  assert markdown == '| Method | a | b |\n|---|---|---|\n| FedAvg | 1.00 | - |'
  assert sweep.table_row(markdown, 'FedAvg') == ['1.00', '-']
  with pytest.raises(ValueError, match="no row 'FedBuff'"):
    sweep.table_row(markdown, 'FedBuff')


def test_check_choice_raises_one_line_config_error():
  from fedsim_jax.config import ConfigError

  sweep.check_choice('latency', 'per_example', ('per_example',))
  with pytest.raises(
    ConfigError,
    match=r"^latency='x' is not allowed; allowed values: "
    r"\['per_example'\]$",
  ):
    sweep.check_choice('latency', 'x', ('per_example',))


def test_write_results_and_write_text(tmp_path):
  records = [{'algorithm': 'fedavg', 'seed': 0}, {'algorithm': 'fedbuff', 'seed': 1}]
  path = sweep.write_results(records, str(tmp_path / 'w'))
  with open(path, encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  sweep.write_text(str(tmp_path / 'a' / 'b.md'), 'text\n')
  assert (tmp_path / 'a' / 'b.md').read_text(encoding='utf-8') == 'text\n'


def test_stale_setting_names_the_first_differing_setting(tmp_path):
  from fedsim_jax.config import base_config

  config = base_config()
  assert sweep.stale_setting(str(tmp_path), config, ['run.eval_every']) is None  # no config.json
  saved = config.to_dict()
  saved['run']['eval_every'] = 7
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  assert sweep.stale_setting(str(tmp_path), config, ['data.num_clients']) is None
  assert (
    sweep.stale_setting(str(tmp_path), config, ['data.num_clients', 'run.eval_every'])
    == 'run.eval_every=7'
  )


def test_stale_setting_compares_algorithm_settings_with_their_defaults(tmp_path):
  from fedsim_jax.config import base_config

  config = base_config()
  config.algorithm.name = 'fedcompass'
  config.algorithm.kwargs.q_min = 20
  saved = config.to_dict()
  saved['algorithm']['kwargs'] = {'q_min': 20, 'latest_time_factor': 1.5}  # as config.json
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  paths = ['algorithm.kwargs.q_min', 'algorithm.kwargs.latest_time_factor']
  # q_min is set and matches; latest_time_factor is unset, so its default 1.2 is compared.
  assert sweep.stale_setting(str(tmp_path), config, paths) == (
    'algorithm.kwargs.latest_time_factor=1.5'
  )
  config.algorithm.kwargs.latest_time_factor = 1.5
  assert sweep.stale_setting(str(tmp_path), config, paths) is None
  config.algorithm.kwargs.q_min = 40
  assert sweep.stale_setting(str(tmp_path), config, paths) == 'algorithm.kwargs.q_min=20'
  # A field the algorithm does not have is not compared.
  config = base_config()
  assert sweep.stale_setting(str(tmp_path), config, paths) is None


def test_overrides_parse_and_apply_per_algorithm():
  from fedsim_jax.config import ConfigError, base_config

  overrides = sweep.parse_overrides(
    'set',
    'feast_msg:algorithm.kwargs.server_learning_rate=0.1; run.eval_every=7;fedavg:data.name=mnist',
    ('fedavg', 'feast_msg'),
  )
  assert overrides == [
    ('feast_msg', 'algorithm.kwargs.server_learning_rate', 0.1),
    (None, 'run.eval_every', 7),
    ('fedavg', 'data.name', 'mnist'),
  ]
  config = base_config()
  config.algorithm.name = 'feast_msg'
  sweep.apply_overrides(config, 'feast_msg', overrides)
  assert config.algorithm.kwargs.server_learning_rate == 0.1 and config.run.eval_every == 7
  assert config.data.name == 'fashion_mnist'  # the fedavg-only item is not applied
  with pytest.raises(ConfigError, match='no_such'):
    sweep.apply_overrides(config, 'fedavg', [(None, 'server.no_such', 1)])
  with pytest.raises(ConfigError, match='no_such'):
    sweep.apply_overrides(config, 'fedavg', [(None, 'algorithm.kwargs.no_such', 1)])
  for bad in ('server.learning_rate', 'bogus:run.eval_every=3', '=3'):
    with pytest.raises(sweep.FlagError, match='--set'):
      sweep.parse_overrides('set', bad, ('fedavg', 'feast_msg'))
  assert sweep.parse_overrides('set', '', ('fedavg',)) == []


def test_algorithm_kwargs_overrides_must_be_fields_of_the_algorithm():
  from fedsim_jax.config import ConfigError, base_config

  config = base_config()
  config.algorithm.name = 'fedbuff'
  sweep.set_existing(config, 'algorithm.kwargs.buffer_size', 3)
  assert config.algorithm.kwargs.buffer_size == 3
  with pytest.raises(
    ConfigError,
    match=r'^algorithm\.kwargs\.bufer_size is not a setting of FedBuffSettings '
    r"\(algorithm\.name='fedbuff'\) \(did you mean 'buffer_size'\?\); allowed: \[",
  ) as error:
    sweep.set_existing(config, 'algorithm.kwargs.bufer_size', 3)
  assert '\n' not in str(error.value)
  # FedBuff has no cohort: a setting of another algorithm is refused, not silently ignored.
  with pytest.raises(ConfigError, match='cohort_size is not a setting of FedBuffSettings'):
    sweep.set_existing(config, 'algorithm.kwargs.cohort_size', 3)
  assert 'bufer_size' not in config.algorithm.kwargs
  assert 'cohort_size' not in config.algorithm.kwargs


def test_validated_checks_every_config_before_any_run():
  good = make_tiny_config('fedbuff')
  bad = make_tiny_config('fedbuff', **{'algorithm.kwargs.buffer_size': 0})
  assert sweep.validated([good]) == [good]
  with pytest.raises(ConfigError, match=r'^algorithm.kwargs.buffer_size=0 is invalid'):
    sweep.validated([good, bad])


def test_run_state_tells_done_running_resumable_and_pending_runs(tmp_path):
  from fedsim_jax.workdir import WorkdirLock

  def run(name, summary=None, rows=()):
    path = tmp_path / name
    path.mkdir()
    (path / 'config.json').write_text('{}')
    (path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    if summary is not None:
      (path / 'summary.json').write_text(json.dumps(summary))
    return str(path)

  # a resumed run: its host time is over both processes
  done = run(
    'done',
    {'status': 'completed', 'host': {'seconds': 2.5, 'total_seconds': 12.5}},
    [{'version': 40}],
  )
  diverged = run('diverged', {'status': 'diverged', 'host': {'seconds': 3.0}}, [{'version': 7}])
  interrupted = run('interrupted', {'status': 'interrupted', 'host': {'seconds': 4.0}})
  killed = run('killed', rows=[{'version': 0}, {'version': 10}])
  crashed = run('crashed', {'status': 'failed', 'error': 'KeyError: x'}, [{'version': 5}])
  running = run('running')
  lock = WorkdirLock(running)
  try:
    states = [
      sweep.run_state(d)
      for d in (done, diverged, interrupted, killed, crashed, running, str(tmp_path / 'absent'))
    ]
  finally:
    lock.release()
  assert [(s.state, s.status, s.host_seconds, s.version) for s in states] == [
    ('done', 'completed', 12.5, 40),
    ('failed', 'diverged', 3.0, 7),
    ('resumable', 'interrupted', 4.0, None),
    ('resumable', None, None, 10),
    ('resumable', 'failed', None, 5),
    ('running', None, None, None),
    ('pending', None, None, None),
  ]
  assert sweep.run_state(running).state == 'resumable'  # the lock is released
  table = sweep.status_table(states, str(tmp_path))
  assert '| diverged | failed (diverged) | 3 | 7 |' in table
  assert table.endswith(
    '1 done, 1 failed, 1 running, 3 resumable, 1 pending of 7 runs; host time so far 20 s'
  )


def test_under_status_load_or_run_runs_nothing(tmp_path, monkeypatch):
  monkeypatch.setattr(experiment, 'run_experiment', lambda *a, **k: pytest.fail('ran a run'))
  monkeypatch.setattr(sweep, '_STATES', [])
  summary, state = sweep.load_or_run(str(tmp_path / 'new'), 'cfg', lambda: pytest.fail('data'))
  assert (summary, state) == (None, 'pending')
  assert [s.state for s in sweep._STATES] == ['pending']
