"""A run never loses work: kill, interrupt and resume the experiment binary, and compare with the
run that was never stopped, bit for bit."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest

import fedsim_jax
from fedsim_jax import algorithms
from fedsim_jax.checkpointing import Checkpoints
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import (
  PreparedRun,
  algorithm_settings,
  config_differences,
  default_settings,
  run_experiment,
)
from fedsim_jax.runtime import StopCondition
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BINARY = os.path.join(_REPO, 'experiments', 'run.py')

# The most stateful algorithm of each kind, each on a budget that runs a few seconds.
KILL_CASES = {
  'fedavg': ('fedavg', {}),
  'fedbuff_ema': ('fedbuff', {'algorithm.kwargs.ema_decay': 0.9}),
  'fedcompass': ('fedcompass', {}),
  'ccfedavg': ('ccfedavg', {}),
  'fare_dust': ('fare_dust', {'algorithm.kwargs.num_selected': 5}),
  'fedasmu': ('fedasmu', {'algorithm.kwargs.trigger_period': 2.0}),
}


def _overrides(extra):
  return {
    'run.num_rounds': 24,
    'run.eval_every': 3,
    'run.checkpoint_every': 2,
    'run.keep_checkpoints': 3,
    **extra,
  }


def _config(data_dir, algorithm, extra):
  return make_tiny_config(algorithm, data_dir, clients=8, slots=3, **_overrides(extra))


def _config_file(tmp_path, data_dir, algorithm, extra):
  path = tmp_path / 'config.py'
  path.write_text(
    textwrap.dedent(f"""
      from tests.helpers import make_tiny_config

      def get_config():
        return make_tiny_config(
          {algorithm!r}, {str(data_dir)!r}, clients=8, slots=3, **{_overrides(extra)!r}
        )
    """),
    encoding='utf-8',
  )
  return path


def _start(config_path, workdir, *flags):
  return subprocess.Popen(
    [sys.executable, _BINARY, f'--config={config_path}', f'--workdir={workdir}', *flags],
    cwd=_REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _wait_for_checkpoint(process, workdir, step):
  """Waits until checkpoint `step` exists (orbax renames a complete one into place). A run that
  never writes it is failed by the test's timeout (pytest-timeout), and killed."""
  path = os.path.join(workdir, 'checkpoints', str(step))
  try:
    while not os.path.isdir(path):
      if process.poll() is not None:
        out, err = process.communicate()
        pytest.fail(
          f'the run ended before checkpoint {step}: rc {process.returncode}\n{err[-2000:]}'
        )
      time.sleep(0.005)
  except BaseException:  # the timeout's failure included
    process.kill()
    raise


def _outputs(workdir, with_trace=True):
  """What a run's result is: metrics.jsonl (and the task trace), the summary without host
  timings, the saved models."""
  run = fedsim_jax.load_run(workdir)
  summary = {k: v for k, v in run.summary.items() if k != 'host'}
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    metrics = f.read()
  if with_trace:
    with open(os.path.join(workdir, 'tasks.jsonl')) as f:
      metrics += f.read()  # the task trace too: truncated to the checkpoint and written on
  params = {name: [np.asarray(x) for x in _leaves(p)] for name, p in run.params.items()}
  return metrics, summary, params


def _leaves(tree):
  import jax

  return jax.tree_util.tree_leaves(tree)


def _assert_same_run(workdir, reference, with_trace=True):
  metrics, summary, params = _outputs(workdir, with_trace)
  ref_metrics, ref_summary, ref_params = _outputs(reference, with_trace)
  assert metrics == ref_metrics
  assert summary == ref_summary
  assert params.keys() == ref_params.keys()
  for name in params:
    for got, want in zip(params[name], ref_params[name]):
      np.testing.assert_array_equal(got, want)


# FedBuff with EMA runs in `make test`; the others, FedASMU's two-segment tasks included, in
# `make test-slow` (every algorithm's save-and-restore is checked in `make test` without a
# process kill, below, and a kill of FedCompass and FedBuff sweeps in test_lockstep_stops.py).
_KILLED_IN_THE_FAST_SUITE = ('fedbuff_ema',)


@pytest.mark.timeout(900)  # up to 82 s on two idle cores (fedasmu), several times that loaded
@pytest.mark.parametrize(
  'case',
  [
    case if case in _KILLED_IN_THE_FAST_SUITE else pytest.param(case, marks=pytest.mark.slow)
    for case in sorted(KILL_CASES)
  ],
)
def test_a_killed_run_resumes_to_the_uninterrupted_run_bit_for_bit(digits_data_dir, tmp_path, case):
  algorithm, extra = KILL_CASES[case]
  reference = tmp_path / 'reference'
  run_experiment(_config(digits_data_dir, algorithm, extra), reference)
  config_path = _config_file(tmp_path, digits_data_dir, algorithm, extra)
  workdir = tmp_path / 'killed'
  rng = np.random.default_rng(sorted(KILL_CASES).index(case))
  process = _start(config_path, workdir)
  _wait_for_checkpoint(process, workdir, step=int(rng.integers(1, 4)))
  time.sleep(rng.uniform(0, 0.05))  # anywhere: mid-event, mid-write of a line or checkpoint
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert process.returncode == -signal.SIGKILL
  assert json.load(open(workdir / 'config.json'))['algorithm']['name'] == algorithm
  resumed = _start(config_path, workdir, '--resume')
  out, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-3000:]
  assert 'resumed from checkpoint' in err
  _assert_same_run(workdir, reference)


@pytest.mark.timeout(900)  # up to 62 s on two idle cores
@pytest.mark.parametrize(
  'signum, code',
  [
    # SIGINT's code and message: also the lockstep sweep's interrupted test and the start-up
    # Ctrl-C fault test in `make test`; this run's SIGINT case in `make test-slow`.
    pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow),
    (signal.SIGTERM, 143),
  ],
)
def test_an_interrupted_run_checkpoints_says_how_to_resume_and_resumes(
  digits_data_dir, tmp_path, signum, code
):
  extra = {'algorithm.kwargs.ema_decay': 0.9}
  reference = tmp_path / 'reference'
  run_experiment(_config(digits_data_dir, 'fedbuff', extra), reference)
  config_path = _config_file(tmp_path, digits_data_dir, 'fedbuff', extra)
  workdir = tmp_path / 'interrupted'
  process = _start(config_path, workdir)
  _wait_for_checkpoint(process, workdir, step=1)
  process.send_signal(signum)
  out, err = process.communicate(timeout=120)
  assert process.returncode == code, err[-3000:]
  last_line = err.strip().splitlines()[-1]
  assert last_line.startswith('interrupted: checkpoint written; resume with the same command')
  assert 'Traceback' not in err
  summary = json.load(open(workdir / 'summary.json'))
  assert summary['status'] == 'interrupted' and summary['signal'] == signum
  resumed = _start(config_path, workdir, '--resume')
  _, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-3000:]
  _assert_same_run(workdir, reference)


def _stop_after_checkpoint(prepared, version):
  """Runs `prepared` until a checkpoint at `version` or later is written, then abandons it as a
  killed process would (its lock released, as the kernel does)."""
  sim = prepared.simulation
  while True:
    sim.run(prepared.stop)
    if prepared._checkpoint_requested:
      prepared.save_checkpoint()
      if sim.version >= version:
        break
    assert not sim.finished(prepared.stop)
  prepared.writer.close()
  prepared._lock.release()


def test_a_finished_run_extends_to_the_longer_run_and_a_damaged_checkpoint_falls_back(
  digits_data_dir, tmp_path, caplog
):
  longer = _config(digits_data_dir, 'fedbuff', {'run.num_rounds': 12})
  run_experiment(longer, tmp_path / 'reference')
  short = _config(digits_data_dir, 'fedbuff', {'run.num_rounds': 8})
  summary = run_experiment(short, tmp_path / 'run')
  assert summary['status'] == 'completed' and summary['final_version'] == 8
  steps = sorted(int(s) for s in os.listdir(tmp_path / 'run' / 'checkpoints'))
  newest = tmp_path / 'run' / 'checkpoints' / str(steps[-1])
  for root, _, names in os.walk(newest / 'arrays'):
    for name in names:
      with open(os.path.join(root, name), 'r+b') as f:
        f.truncate(1)
  with caplog.at_level('WARNING'):
    summary = run_experiment(longer, tmp_path / 'run', resume=True)
  assert 'is damaged' in caplog.text
  assert summary['final_version'] == 12
  _assert_same_run(tmp_path / 'run', tmp_path / 'reference')


def test_resume_refuses_a_config_that_makes_another_run(digits_data_dir, tmp_path):
  config = _config(digits_data_dir, 'fedavg', {})
  _stop_after_checkpoint(PreparedRun(config, tmp_path), 2)
  metrics = (tmp_path / 'metrics.jsonl').read_text()
  other = _config(digits_data_dir, 'fedavg', {'client.learning_rate': 0.2, 'seed': 3})
  with pytest.raises(ConfigError) as error:
    run_experiment(other, tmp_path, resume=True)
  message = str(error.value)
  assert '\n' not in message
  assert 'client.learning_rate, seed' in message and 'allowed changes: run.num_rounds' in message
  assert (tmp_path / 'metrics.jsonl').read_text() == metrics  # nothing touched


def test_a_resumed_run_reports_its_host_time_over_every_process(
  digits_data_dir, tmp_path, monkeypatch
):
  # The host clock stands still but for one second per evaluation.
  from fedsim_jax import experiment
  from fedsim_jax.lifecycle import run_lifecycle

  clock = types.SimpleNamespace(now=1000.0)
  for module in (experiment, run_lifecycle):  # the start-up's clock and the run's
    monkeypatch.setattr(module, 'time', types.SimpleNamespace(perf_counter=lambda: clock.now))
  record = PreparedRun.record

  def record_one_second(self, sim):
    clock.now += 1.0
    record(self, sim)

  monkeypatch.setattr(PreparedRun, 'record', record_one_second)
  config = _config(digits_data_dir, 'fedavg', {'run.num_rounds': 6})
  first = PreparedRun(config, tmp_path)
  clock.now += 100.0  # host time the first process spends before its checkpoint
  _stop_after_checkpoint(first, 2)
  checkpointed = Checkpoints(str(tmp_path / 'checkpoints')).load_latest().state['run']
  assert checkpointed['processes_run'] == 1
  assert checkpointed['host_seconds'] == 100.0 + 1.0  # and version 0's evaluation
  clock.now += 50.0  # time after the checkpoint, lost with the first process
  summary = run_experiment(config, tmp_path, resume=True)
  host = summary['host']
  assert host['processes_run'] == 2
  assert host['seconds'] == 2.0  # the evaluations of versions 3 and 6
  # the earlier process's time up to its checkpoint, plus this process's
  assert host['total_seconds'] == checkpointed['host_seconds'] + host['seconds']
  fresh = run_experiment(config, tmp_path / 'fresh')['host']
  assert fresh['processes_run'] == 1
  assert fresh['total_seconds'] == fresh['seconds'] == 3.0  # versions 0, 3 and 6


def test_resume_without_a_checkpoint_starts_from_the_beginning(digits_data_dir, tmp_path):
  config = _config(digits_data_dir, 'fedavg', {'run.num_rounds': 4})
  run_experiment(config, tmp_path / 'reference')
  summary = run_experiment(config, tmp_path / 'fresh', resume=True)
  assert summary['status'] == 'completed'
  _assert_same_run(tmp_path / 'fresh', tmp_path / 'reference')


def test_pausing_a_simulation_and_running_it_on_changes_nothing(digits_data_dir, tmp_path):
  config = _config(
    digits_data_dir,
    'fedcompass',
    {'run.num_rounds': 10, 'run.checkpoint_every': None, 'run.checkpoint_every_minutes': None},
  )
  whole = PreparedRun(config, tmp_path / 'whole')
  whole.simulation.run(whole.stop)
  paused = PreparedRun(config, tmp_path / 'paused')
  sim = paused.simulation
  for version in range(1, 11):
    sim.run(StopCondition(max_versions=version))
    sim.request_pause()  # a request between runs is dropped by the next run
  sim.run(paused.stop)
  assert sim.version == whole.simulation.version == 10
  assert sim.now == whole.simulation.now
  assert sim.accounting.as_dict() == whole.simulation.accounting.as_dict()
  for got, want in zip(_leaves(sim.params), _leaves(whole.simulation.params)):
    np.testing.assert_array_equal(got, want)
  for run in (whole, paused):
    run.writer.close()
    run._lock.release()


# Variants whose state is their family's classes with other settings: their family's
# representative (fedasmu, ccfedavg, fedcompass, fedadam, fedavg) runs in `make test`, they in
# `make test-slow`.
_SAME_STATE_AS_THEIR_FAMILY = (
  'ccfedavg_c',
  'ccfedavg_strategy1',
  'ccfedavg_strategy2',
  'fedadagrad',
  'fedasmu_0',
  'fedasmu_da',
  'fedasmu_fa',
  'fedasmu_h1',
  'fedasmu_h2',
  'fedasmu_h3',
  'fedavg_dropout',
  'fedcompass_m',
  'fedcompass_n',
  'fedprox',
  'fedyogi',
)


@pytest.mark.parametrize(
  'algorithm',
  [
    pytest.param(name, marks=pytest.mark.slow) if name in _SAME_STATE_AS_THEIR_FAMILY else name
    for name in algorithms.names()
  ],
)
def test_every_algorithm_saves_its_state_after_any_version_and_resumes_from_it_unchanged(
  digits_data_dir, tmp_path, algorithm
):
  # What a checkpoint does at every version (`Simulation.state`, which compacts held results),
  # through pickle into a fresh simulation, against the run that never stopped.
  overrides = {
    'run.num_rounds': 5,
    'run.checkpoint_every': None,
    'run.checkpoint_every_minutes': None,
  }
  if 'trigger_period' in algorithms.get_spec(algorithm).settings.field_names():
    overrides['algorithm.kwargs.trigger_period'] = 2.0  # FedASMU's: no default
  if algorithm == 'fedbn':  # a BatchNorm model
    overrides['model.kwargs.norm'] = 'batch'
  config = make_tiny_config(algorithm, digits_data_dir, clients=8, slots=3, **overrides)
  whole = PreparedRun(config, tmp_path / 'whole')
  whole.simulation.run(whole.stop)
  sim = PreparedRun(config, tmp_path / 'first').simulation
  for version in range(1, 6):
    sim.run(StopCondition(max_versions=version))
    resumed = PreparedRun(config, tmp_path / f'from_{version}', overwrite=True).simulation
    resumed.restore(pickle.loads(pickle.dumps(sim.state())))
    sim = resumed
  sim.run(whole.stop)
  assert (sim.version, sim.now) == (whole.simulation.version, whole.simulation.now)
  assert sim.accounting.as_dict() == whole.simulation.accounting.as_dict()
  for got, want in zip(_leaves(sim.params), _leaves(whole.simulation.params)):
    np.testing.assert_array_equal(got, want)


def test_load_run_gives_models_that_reproduce_the_reported_accuracy(digits_data_dir, tmp_path):
  config = _config(digits_data_dir, 'fedbuff', {'algorithm.kwargs.ema_decay': 0.5})
  summary = run_experiment(config, tmp_path)
  run = fedsim_jax.load_run(tmp_path)
  assert run.config['algorithm']['kwargs']['ema_decay'] == 0.5
  assert run.summary == summary
  assert set(run.params) == {'final', 'best', 'evaluated'}
  from fedsim_jax.data.loading import load_dataset

  data = load_dataset('digits', str(digits_data_dir))
  logits = run.model.apply(run.params['evaluated'], data.test_x)
  accuracy = float(np.mean(np.argmax(logits, -1) == data.test_y))
  assert accuracy == pytest.approx(summary['final_accuracy'], abs=1e-6)
  best = max(row['test_accuracy'] for row in run.metrics)
  logits = run.model.apply(run.params['best'], data.test_x)
  assert float(np.mean(np.argmax(logits, -1) == data.test_y)) == pytest.approx(best, abs=1e-6)


def test_a_setting_added_after_the_checkpoint_resumes_at_its_default():
  config = make_tiny_config('fare_dust')
  settings = algorithm_settings(config)
  current = config.to_dict()
  current['algorithm']['kwargs'] = settings.as_dict()
  saved = json.loads(json.dumps(current))
  del saved['algorithm']['kwargs']['ema_warmup']  # a checkpoint older than the setting
  del saved['run']['on_divergence']
  defaults = default_settings(settings)
  assert config_differences(saved, current, defaults) == []
  # Without the defaults, or set away from its default, the added setting is a difference.
  assert config_differences(saved, current) == [
    'algorithm.kwargs.ema_warmup',
    'run.on_divergence',
  ]
  current['algorithm']['kwargs']['ema_warmup'] = 'num_updates'
  assert config_differences(saved, current, defaults) == ['algorithm.kwargs.ema_warmup']
  # A setting the current code no longer has is always a difference.
  saved['algorithm']['kwargs']['retired_setting'] = 1
  assert 'algorithm.kwargs.retired_setting' in config_differences(saved, current, defaults)


def _old_layout(config):
  """`config` (a resolved config.json) as the layout before models, latency and availability
  models were plugins stored it: every model's settings in sections of their own."""
  old = json.loads(json.dumps(config))
  latency = old['latency']
  old['model'] = {'name': old['model']['name'], 'hidden_sizes': [16], 'norm': None}
  old['latency'] = {
    'model': latency['name'],
    'per_step': latency['kwargs'],
    'lognormal': {'model': 'per_example'},
    'fedscale': {'bandwidth_scale': 1.0},
    'device_ratio': {'fastest_step_time': 0.1, 'ratio': 5.0, 'jitter': 0.0},
    'trace': {'trace': None},
  }
  old['availability'] = {
    'model': 'always',
    'periodic': {'online_fraction': 0.5, 'period': 86400.0},
    'trace': {'trace': None},
  }
  return old


def test_a_run_checkpointed_in_the_layout_before_model_plugins_resumes(digits_data_dir, tmp_path):
  """A checkpoint whose stored config has `latency.model`, `latency.per_step.<field>` and
  `model.hidden_sizes` (runs started before those moved) resumes to the uninterrupted run."""
  config = _config(digits_data_dir, 'fedavg', {'latency.kwargs.distribution': 'exponential'})
  run_experiment(config, tmp_path / 'reference')
  _stop_after_checkpoint(PreparedRun(config, tmp_path / 'run'), 6)
  checkpoints = tmp_path / 'run' / 'checkpoints'
  for step in os.listdir(checkpoints):
    path = checkpoints / step / 'meta' / 'metadata'  # the checkpoint's JSON meta
    meta = json.loads(path.read_text(encoding='utf-8'))
    meta['config'] = _old_layout(meta['config'])
    path.write_text(json.dumps(meta), encoding='utf-8')
  summary = run_experiment(config, tmp_path / 'run', resume=True)
  assert summary['status'] == 'completed' and summary['final_version'] == 24
  _assert_same_run(tmp_path / 'run', tmp_path / 'reference')
