"""The data layer's benchmark (`benchmarks/data_loading.py`) at its quick size: its JSON lines,
budgets and table (the figures themselves are not checked: timing is `make bench`'s)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'benchmarks', 'data_loading.py')


def test_quick_run_times_digits_and_the_refusals(tmp_path):
  output = tmp_path / 'out' / 'data_loading.jsonl'
  result = subprocess.run(
    [sys.executable, BINARY, '--quick', f'--output={output}'],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [line for line in result.stdout.splitlines() if line.startswith('{')]
  assert output.read_text(encoding='utf-8').splitlines() == lines
  records = [json.loads(line) for line in lines]
  assert [r['operation'] for r in records] == [
    'prepare digits',
    'load digits',
    'reload digits',
    'refuse: not prepared',
    'refuse: missing source',
  ]
  for r in records:
    assert r['skipped'] is None and isinstance(r['seconds'], float) and r['seconds'] >= 0, r
  assert [r['budget_seconds'] for r in records] == [None, None, None, 0.5, 1.0]
  assert [r['within_budget'] is None for r in records] == [True, True, True, False, False]
  table = result.stdout[result.stdout.index('| operation |') :].splitlines()
  assert [row.split('|')[1].strip() for row in table[2:]] == [r['operation'] for r in records]


def test_bad_flags_exit_2_with_one_line(tmp_path):
  result = subprocess.run(
    [sys.executable, BINARY, '--no_such_flag'],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=120,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
