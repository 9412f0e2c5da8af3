"""The benchmark harness (`benchmarks/harness.py`): every case at tiny size, its JSON lines and
table, its flag errors, and the measurement arithmetic."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from benchmarks import accelerator_wheels, harness_lib
from tests import bare_image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'benchmarks', 'harness.py')

EXPECTED = [
  ('sync_mlp', 'fedsim_vmap'),
  ('sync_mlp', 'fedsim_loop'),
  ('sync_mlp', 'fedsim_loop_1thread'),
  ('sync_mlp', 'jax_client_loop'),
  ('sync_mlp', 'torch_client_loop'),
  ('sync_mlp', 'roofline'),
  ('sync_cnn', 'fedsim_vmap'),
  ('sync_cnn', 'fedsim_loop'),
  ('sync_cnn', 'fedsim_loop_host'),
  ('sync_cnn', 'fedsim_loop_host_1thread'),
  ('sync_cnn', 'jax_client_loop'),
  ('sync_cnn', 'torch_client_loop'),
  ('sync_cnn', 'roofline'),
  ('fedbuff_mlp', 'fedsim_vmap'),
  ('fedbuff_mlp', 'fedsim_loop'),
  ('fedbuff_mlp', 'fedsim_loop_1thread'),
  ('compass_mlp', 'fedsim_vmap'),
  ('compass_mlp', 'fedsim_loop'),
  ('compass_mlp', 'fedsim_loop_1thread'),
  ('scheduling', 'fedsim_no_training'),
  ('scheduling', 'fedsim_timeline'),
]


def _positive(value) -> bool:
  return isinstance(value, (int, float)) and value > 0


# In `make test-slow`: 45 s of `make test`'s 15-minute budget; the harness's cases are also run
# by `make bench`, and its reduced device check and CNN step timing stay in `make test`.
@pytest.mark.slow
@pytest.mark.timeout(900)  # 107 s on two idle cores, 370 s loaded
def test_quick_run_measures_every_case_and_strategy(tmp_path):
  output = tmp_path / 'out' / 'bench.jsonl'
  # One PyTorch thread: OpenMP threads spinning on a busy machine (parallel tests) cost seconds.
  result = subprocess.run(
    [sys.executable, BINARY, '--quick', '--torch_threads=1', f'--output={output}'],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [line for line in result.stdout.splitlines() if line.startswith('{')]
  records = [json.loads(line) for line in lines]
  assert [(r['case'], r['strategy']) for r in records] == EXPECTED
  assert output.read_text(encoding='utf-8').splitlines() == lines
  for r in records:
    assert set(harness_lib.FIELDS) <= set(r), r
    assert _positive(r['peak_rss_mb']), r
    if r.get('skipped'):
      assert r['strategy'] == 'torch_client_loop'
      assert r['skipped'] == 'skipped: torch not installed (make bench-setup)'
      assert r['examples_per_s'] is None and r['compile_s'] is None
      continue
    assert r['compile_s'] >= 0, r
    assert r['measured_seconds'] > 0, r
    if r['case'] == 'scheduling':
      assert r['examples_per_s'] is None
      assert _positive(r['events_per_s']) and _positive(r['updates_per_s'])
      assert r['measured_events'] > r['measured_updates']  # arrivals + dispatches (+ timers)
      continue
    assert 'events_per_s' not in r
    assert _positive(r['examples_per_s']), r
    if r['strategy'] == 'roofline':
      assert r['updates_per_s'] is None and r['programs'] == 1
    else:
      assert _positive(r['updates_per_s']), r
    if r['strategy'].startswith('fedsim_') or r['strategy'] == 'jax_client_loop':
      assert isinstance(r['programs'], int) and r['programs'] >= 1, r
    if r['strategy'].startswith('fedsim_loop'):  # one task per core unless told otherwise
      assert r['threads'] == (
        1 if r['strategy'].endswith('_1thread') else harness_lib.cpu_cores()
      ), r
    if r['strategy'] == 'torch_client_loop':
      assert r['programs'] is None
  table = result.stdout[result.stdout.index('| case |') :]
  rows = [
    tuple(cell.strip() for cell in line.split('|')[1:3])
    for line in table.splitlines()
    if line.startswith('| ') and not line.startswith('| case |')
  ]
  assert rows == EXPECTED
  assert 'x |' in table  # ratios to the roofline (and the torch loop when installed)
  assert 'quick sizes' in table and 'events/s' in table


@pytest.mark.parametrize(
  'args',
  [
    ['--cases=sync_mlp,bogus'],
    ['--cases=,'],
    ['--measure_seconds=-1'],
    ['--torch_threads=0'],
    ['--no_such_flag'],
    ['extra'],
  ],
)
def test_bad_flags_exit_2_with_one_line(args, tmp_path):
  result = subprocess.run(
    [sys.executable, BINARY, *args, f'--output={tmp_path / "x.jsonl"}'],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=120,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert not result.stdout
  assert not os.path.exists(tmp_path / 'x.jsonl')


class _Clock:
  """A stand-in for `time.perf_counter` that moves only when told."""

  def __init__(self):
    self.now = 1000.0

  def perf_counter(self):
    return self.now


def test_measure_separates_warm_up_from_steady_state(monkeypatch):
  clock = _Clock()
  monkeypatch.setattr(harness_lib, 'time', clock)
  calls = []

  def unit():
    clock.now += 0.3 if not calls else 0.01  # the first call compiles
    calls.append(1)
    return harness_lib.Work(examples=100, updates=2)

  m = harness_lib.measure(unit, min_seconds=0.0, min_units=3, max_units=3)
  assert m.units == 3 and len(calls) == 4
  assert m.work.examples == 300 and m.work.updates == 6
  assert m.seconds == pytest.approx(0.03)
  # the first call's extra time, not its whole time: 0.3 s less its 100 examples at the steady
  # rate of 100 examples per 0.01 s
  assert m.compile_s == pytest.approx(0.29)


def test_report_prints_ratios_to_roofline_torch_and_sync():
  def rec(case, strategy, eps):
    return {
      'case': case,
      'strategy': strategy,
      'examples_per_s': eps,
      'updates_per_s': 1.0,
      'compile_s': 0.0,
      'programs': 1,
      'peak_rss_mb': 1.0,
    }

  records = [
    rec('sync_mlp', 'fedsim_vmap', 500.0),
    rec('sync_mlp', 'torch_client_loop', 250.0),
    rec('sync_mlp', 'roofline', 1000.0),
    rec('fedbuff_mlp', 'fedsim_vmap', 750.0),
    {**rec('scheduling', 'fedsim_no_training', None), 'events_per_s': 200_000.0},
  ]
  table = harness_lib.markdown_report(records)
  rows = {
    tuple(cell.strip() for cell in line.split('|')[1:3]): line
    for line in table.splitlines()
    if line.startswith('| ')
  }
  assert rows['sync_mlp', 'fedsim_vmap'].endswith('| 0.50x | 2.00x | - |')
  assert rows['fedbuff_mlp', 'fedsim_vmap'].endswith('| - | - | 1.50x |')
  assert 'meets the 100,000 events/s target' in table
  assert 'FedBuff / sync FedAvg (MLP), best fedsim strategy of each, examples/s: 1.50' in table


def _accelerator_check(python, tmp_path, *flags):
  """`benchmarks/accelerator_check.py --reduced` run by `python` (fedsim from this checkout):
  the process, its JSON lines and the table it wrote."""
  table = tmp_path / 'out' / 'accelerator.md'
  result = subprocess.run(
    [
      python,
      os.path.join(ROOT, 'benchmarks', 'accelerator_check.py'),
      '--reduced',
      f'--output={table}',
      *flags,
    ],
    capture_output=True,
    text=True,
    cwd=ROOT,
    env={**os.environ, 'PYTHONPATH': ROOT},
    timeout=600,
  )
  records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
  return result, records, table


@pytest.mark.timeout(900)
@pytest.mark.slow  # ~35 s; tests/test_accelerator_wheels.py checks the bare image's imports fast
def test_accelerator_check_runs_reduced_on_cpu_and_names_the_device(tmp_path):
  """The check, reduced, in a bare GPU machine's environment with the carried wheels
  (`tests/bare_image.py`): every case's records, a table headed by the device and the JSON
  lines next to it."""
  python = bare_image.make_bare_venv(
    str(tmp_path / 'venv'),
    bare_image.requirement_closure(accelerator_wheels.BARE) | set(accelerator_wheels.WHEELS),
  )
  result, records, table = _accelerator_check(python, tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  by_case = {}
  for r in records:
    by_case.setdefault(r['case'], []).append(r)
  backends = [(r['case'], r['strategy']) for r in records if r['case'].startswith('sync_')]
  assert backends == [
    ('sync_mlp', 'fedsim_vmap'),
    ('sync_mlp', 'fedsim_loop'),
    ('sync_cnn', 'fedsim_vmap'),
    ('sync_cnn', 'fedsim_loop'),
  ]
  assert all(_positive(r['examples_per_s']) for r in records if r['case'].startswith('sync_'))
  emnist = by_case['emnist_fedavg']
  assert [r['strategy'] for r in emnist] == ['fedsim_vmap', 'fedsim_loop']
  for r in emnist:
    assert r['device'] == '1 x CPU cpu'
    assert r['rounds_measured'] == r['rounds'] == 2
    assert _positive(r['examples_per_s']) and _positive(r['round_s'])
    assert r['projected_s'] == pytest.approx(r['first_round_s'] + r['round_s'], abs=0.11)
  [seeds] = by_case['seeds']
  assert seeds['status'] == 'measured' and seeds['runs'] == 2
  assert seeds['identical_metrics'] is True and seeds['execution'] == 'concurrent'
  [points] = by_case['hyperparams']
  assert points['learning_rates'] == [0.1, 0.05]
  # Until lockstep sweeps take configs that differ in the learning rate, the check says so.
  assert points['status'] == 'measured' or points['status'].startswith(
    'unsupported: lockstep sweeps need configs that differ only in'
  ), points
  if points['status'] == 'measured':
    assert points['identical_metrics'] is True
  one, four = by_case['devices']
  assert (one['strategy'], four['strategy']) == ('1 device', '4 devices')
  assert one['device'] == four['device'] == '4 x CPU cpu'
  assert four['final_loss'] == pytest.approx(one['final_loss'], abs=1e-5)
  text = table.read_text()
  assert text.startswith('Device: 1 x CPU cpu (JAX ')
  for title in ('**Backends', '**EMNIST FedAvg', '**Batched runs', '**Devices'):
    assert title in text
  assert text.count('| fedsim_loop |') == 3  # sync_mlp, sync_cnn and emnist
  jsonl = [json.loads(line) for line in (tmp_path / 'out' / 'accelerator.jsonl').open()]
  assert jsonl == records


def test_accelerator_check_records_cases_past_its_budget_as_skipped(tmp_path):
  """A budget spent before the first case: each case is recorded as skipped, in the table
  too, and the check still succeeds."""
  result, records, table = _accelerator_check(sys.executable, tmp_path, '--budget_seconds=0')
  assert result.returncode == 0, result.stderr[-3000:]
  assert [r['case'] for r in records] == [
    'sync_mlp',
    'sync_cnn',
    'emnist_fedavg',
    'emnist_fedavg',
    'seeds',
    'hyperparams',
    'devices',
  ]
  assert all(r['status'] == 'skipped: budget spent (0 s left)' for r in records)
  assert table.read_text().count('| skipped: budget spent (0 s left) |') == len(records)


def test_accelerator_check_refuses_a_bad_flag_in_one_line(tmp_path):
  result, records, table = _accelerator_check(sys.executable, tmp_path, '--cases=backends,gpu')
  assert result.returncode == 2 and not records and not table.exists()
  assert result.stderr.strip().splitlines() == [
    "error: --cases='backends,gpu': 'gpu' is invalid; allowed values: "
    'backends,emnist,seeds,hyperparams,devices'
  ]


def _run_script(name, *flags):
  result = subprocess.run(
    [sys.executable, os.path.join(ROOT, 'benchmarks', name), *flags],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout


def test_scale_fedbuff_reports_its_bounded_batches():
  """A tiny `benchmarks/scale_fedbuff.py`: 60 in flight, batches bounded at 16, so no batch
  computes more than 16 tasks and the bound is reported."""
  out = _run_script(
    'scale_fedbuff.py',
    '--clients=80',
    '--updates=120',
    '--concurrency=60',
    '--min_size=20',
    '--max_size=24',
    '--max_batch_tasks=16',
  )
  (record,) = [json.loads(line) for line in out.splitlines() if line.startswith('{')]
  assert record['clients'] == 80 and record['client_updates'] >= 120
  assert record['max_batch_tasks'] == 16 and 0 < record['mean_executed_batch_size'] <= 16
  assert record['peak_rss_mb'] >= record['setup_peak_rss_mb'] > 0


@pytest.mark.parametrize('flags', [(), ('--xla_options=jax',), ('--framework=torch',)])
def test_cnn_step_times_one_step(flags):
  if 'torch' in ''.join(flags) and importlib.util.find_spec('torch') is None:
    pytest.skip('PyTorch is not installed (make bench-setup)')
  out = _run_script('cnn_step.py', '--steps=3', *flags)
  assert re.fullmatch(r'(jax, 1 stream\(s\)|torch): [\d,]+ examples/s\n', out)


def test_cnn_step_profile_names_what_each_operation_computes():
  out = _run_script('cnn_step.py', '--steps=3', '--profile')
  rows = [line for line in out.splitlines() if line.startswith('| ')][1:]
  assert rows[-2].startswith('| all operations |') and rows[-1].startswith('| wall time')
  computed = ' '.join(row.split(' | ')[1] for row in rows[:-2])
  assert 'Conv_1/conv_general_dilated' in computed and 'Dense_0/dot_general' in computed
  micros = [float(row.rsplit('|', 2)[1].replace(',', '')) for row in rows]
  assert all(m >= 0 for m in micros) and micros[-2] >= max(micros[:-2]) and micros[-1] > 0


@pytest.mark.parametrize(
  'args',
  [
    ['--rtol=nan'],
    ['--accuracy_tolerance=-1'],
    ['--learning_rates=0.1,-1'],
    ['--learning_rates=inf'],
    ['--learning_rates=x'],
    ['--seeds=0'],
    ['--versions=0'],
  ],
)
def test_lockstep_sweep_benchmark_refuses_bad_flags_in_one_line(args, tmp_path):
  result = subprocess.run(
    [sys.executable, os.path.join(ROOT, 'benchmarks', 'lockstep_sweep.py'), *args,
     f'--output={tmp_path / "x.jsonl"}'],
    capture_output=True, text=True, cwd=ROOT, timeout=120,
  )  # fmt: skip
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert not os.path.exists(tmp_path / 'x.jsonl')
