"""The tables of docs/results/ against the committed result files they are generated from."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from experiments import results_data, results_docs

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SCRIPT = os.path.join(_REPO, 'experiments', 'results_docs.py')
_FEDASMU = os.path.join(_REPO, 'experiments', 'fedasmu', 'reproduce.py')
# The docs whose tables are results (performance.md holds dated host measurements instead, besides
# its generated scaling curves: test_performance_scaling_curves_are_generated).
_TABLE_DOCS = (
  'ccfedavg.md',
  'fedasmu.md',
  'fedcompass_mnist.md',
  'latency.md',
  'stragglers.md',
)
_RECORDED_NOTE = 'Recorded with an earlier version of the code; not yet regenerable.'


def _run(*flags, timeout=120):
  return subprocess.run(
    [sys.executable, *flags], capture_output=True, text=True, cwd=_REPO, timeout=timeout
  )


def _read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def test_every_generated_table_is_what_its_committed_data_give():
  diffs = results_docs.check(_REPO)
  assert not diffs, ''.join(diffs) + '\nrun .venv/bin/python experiments/results_docs.py --write'


def test_every_table_is_generated_or_marked_recorded():
  generated = set()
  for name in _TABLE_DOCS:
    path = os.path.join(_REPO, 'docs', 'results', name)
    text = _read(path)
    found = results_docs.regions(text, path)
    inside = [(r.start, r.end) for r in found]
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
      if line.startswith('|'):
        assert any(start <= offset < end for start, end in inside), (
          f'{name}:{number}: a table outside <!-- table: ... --> / <!-- recorded table --> markers'
        )
      offset += len(line)
    for region in found:
      if region.spec is None:
        assert _RECORDED_NOTE in region.body, f'{name}:{region.line}: recorded without its note'
      else:
        generated.add(name)
  # Tables regenerate in these docs now.
  assert generated == {
    'ccfedavg.md',
    'fedasmu.md',
    'fedcompass_mnist.md',
    'latency.md',
    'stragglers.md',
  }


def test_performance_scaling_curves_are_generated():
  path = os.path.join(_REPO, 'docs', 'results', 'performance.md')
  names = {r.spec.split()[0] for r in results_docs.regions(_read(path), path) if r.spec}
  assert {
    'scaling.setup',
    'scaling.cohort',
    'scaling.clients',
    'scaling.model',
    'scaling.evaluation',
    'scaling.growth',
  } <= names


# Words that judge a result against the paper. They belong to the generated conclusions tables
# (experiments/agreement.py computes them); prose outside generated tables explains, never
# judges. Every form, any case: agree / agrees / agreed / agreement, disagree..., reproduces /
# reproduced, inconclusive, confirm..., contradict... (not the modules experiments/agreement.py
# and experiments/<kit>/reproduce.py, nor the runs/reproduce_* folders).
VERDICT_WORDS = re.compile(
  r'\b(?:dis)?agree(?:s|d|ing|ments?)?\b(?!\.py)'
  r'|\binconclusive\b'
  r'|\breproduc(?:e|es|ed|ing)\b(?!\.py)'
  r'|\bconfirm(?:s|ed|ing)?\b'
  r'|\bcontradict(?:s|ed|ing)?\b',
  re.IGNORECASE,
)
# The pages of reproductions of a paper: each assesses the paper's conclusions in generated
# tables (latency.md from the latency model alone).
_CONCLUSION_DOCS = (
  'ccfedavg.md',
  'fedasmu.md',
  'fedcompass_mnist.md',
  'latency.md',
  'stragglers.md',
)


def verdict_words_outside_generated_tables(text: str, path: str = '<doc>') -> list[str]:
  """'line: word' for each verdict word of `text` outside its generated tables."""
  spans = [(r.start, r.end) for r in results_docs.regions(text, path) if r.spec is not None]
  found = []
  for match in VERDICT_WORDS.finditer(text):
    if not any(start <= match.start() < end for start, end in spans):
      found.append(f'{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}')
  return found


def test_verdict_words_appear_only_in_generated_tables():
  for path in sorted(glob.glob(os.path.join(_REPO, 'docs', 'results', '*.md'))):
    found = verdict_words_outside_generated_tables(_read(path), path)
    assert not found, f'{os.path.basename(path)}: verdict words outside generated tables: {found}'


def test_the_verdict_word_check_catches_every_form_and_spares_binaries():
  text = (
    'Agreement with the paper. It agrees, it DOES NOT AGREE, they disagree; inconclusive.\n'
    'FedAvg reproduces it; the paper is confirmed, not contradicted.\n'
    'Run experiments/fedasmu/reproduce.py --workdir=runs/reproduce_fedasmu; a reproduction;\n'
    'experiments/agreement.py.\n'
    '<!-- table: runs docs/results/data/x.json -->\n\nagrees\n\n<!-- end table -->\n'
    '<!-- recorded table -->\nagrees\n<!-- end table -->\n'
  )
  assert verdict_words_outside_generated_tables(text) == [
    '1: Agreement',
    '1: agrees',
    '1: AGREE',
    '1: disagree',
    '1: inconclusive',
    '2: reproduces',
    '2: confirmed',
    '2: contradicted',
    '11: agrees',  # a recorded table is not generated
  ]


def test_every_reproduction_page_assesses_the_papers_conclusions_in_generated_tables():
  for name in _CONCLUSION_DOCS:
    path = os.path.join(_REPO, 'docs', 'results', name)
    specs = [r.spec for r in results_docs.regions(_read(path), path) if r.spec]
    assert any(spec.split()[0].endswith('agreement') for spec in specs), name


def test_pages_state_the_code_their_runs_ran_on():
  texts = {p: _read(p) for p in glob.glob(os.path.join(_REPO, 'docs', 'results', '*.md'))}
  for path, text in texts.items():
    assert 'current code' not in text, path
  specs = [
    r.spec for path, text in texts.items() for r in results_docs.regions(text, path) if r.spec
  ]
  described = {spec.split()[1] for spec in specs if spec.split()[0] == 'runs'}
  for path in glob.glob(os.path.join(_REPO, 'docs', 'results', 'data', '*.json')):
    assert os.path.relpath(path, _REPO) in described, f'no runs block for {path}'


def test_commands_in_the_results_docs_are_written_in_full():
  for path in glob.glob(os.path.join(_REPO, 'docs', 'results', '*.md')):
    for block in re.findall(r'```(?:bash)?\n(.*?)```', _read(path), re.DOTALL):
      assert '...' not in block and not re.search(r'<[a-z][^>]*>', block), (path, block)
      assert not re.search(r'^\s*\$\w', block, re.MULTILINE), (path, block)  # no $P shorthands


def test_committed_result_files_are_small_and_each_feeds_a_table():
  paths = sorted(glob.glob(os.path.join(_REPO, 'docs', 'results', 'data', '*.json')))
  assert paths
  markers = ''.join(_read(p) for p in glob.glob(os.path.join(_REPO, 'docs', 'results', '*.md')))
  for path in paths:
    assert os.path.getsize(path) < 100_000, path
    data = results_data.load(path)
    assert data['command'].startswith(
      ('.venv/bin/python experiments/', '.venv/bin/python benchmarks/scaling.py')
    )
    assert all('workdir' not in record and record['finished'] for record in data['records'])
    relative = os.path.relpath(path, _REPO)
    assert re.search(rf'<!-- table: \S+ {re.escape(relative)}', markers), relative


def test_fedasmu_result_file_holds_the_600_second_sweep():
  data = results_data.load(os.path.join(_REPO, 'docs', 'results', 'data', 'fedasmu_600s.json'))
  assert data['kit'] == 'fedasmu'
  assert data['settings']['max_virtual_time'] == 600.0 and data['settings']['eval_every'] == 10
  runs = [(r['method'], r['seed']) for r in data['records']]
  assert len(runs) == 24 and len(set(runs)) == 24  # 16 methods on seed 0, 8 on seed 1
  assert sorted(m for m, seed in runs if seed == 1) == sorted(
    ['fedasmu', 'fedasync', 'fedbuff', 'fedsa', 'fedavg', 'fedasmu_da', 'fedasmu_fa', 'fedasmu_0']
  )
  first = next(r for r in data['records'] if (r['method'], r['seed']) == ('fedasmu', 0))
  assert first['final_accuracy'] == 0.7279
  # The doc's command is the one that wrote the file.
  doc = _read(os.path.join(_REPO, 'docs', 'results', 'fedasmu.md'))
  flags = data['command'].split()[2:]
  commands = [c.replace('\\\n', ' ') for c in re.findall(r'```bash\n(.*?)```', doc, re.DOTALL)]
  assert any(all(flag in c.split() for flag in flags) for c in commands)


def _copy_fedasmu_doc(root):
  """A repository root in `root` holding fedasmu.md and its result files."""
  data_dir = os.path.join(_REPO, 'docs', 'results', 'data')
  relatives = ['docs/results/fedasmu.md'] + [
    f'docs/results/data/{name}' for name in os.listdir(data_dir) if name.startswith('fedasmu_')
  ]
  for relative in relatives:
    os.makedirs(os.path.dirname(root / relative), exist_ok=True)
    shutil.copy(os.path.join(_REPO, relative), root / relative)
  return root / 'docs' / 'results' / 'data' / 'fedasmu_600s.json'


def test_a_changed_number_in_the_data_fails_the_check_until_the_doc_is_rewritten(tmp_path):
  data_path = _copy_fedasmu_doc(tmp_path)
  check = (_SCRIPT, '--check', f'--root={tmp_path}')
  result = _run(*check)
  assert result.returncode == 0, result.stdout + result.stderr
  assert result.stdout.strip() == '1 doc(s) match their data'

  text = data_path.read_text(encoding='utf-8')
  assert text.count('"final_accuracy": 0.7279') == 1
  data_path.write_text(text.replace('"final_accuracy": 0.7279', '"final_accuracy": 0.7012'))
  result = _run(*check)
  assert result.returncode == 1
  # Seed 0's row of the per-seed table (final / best).
  assert '-| FedASMU | 0.728 / 0.728 |' in result.stdout
  assert '+| FedASMU | 0.701 / 0.728 |' in result.stdout
  assert '1 doc(s) differ from their data' in result.stdout

  result = _run(_SCRIPT, '--write', f'--root={tmp_path}')
  assert result.returncode == 0, result.stderr
  assert '| FedASMU | 0.701 / 0.728 |' in (tmp_path / 'docs/results/fedasmu.md').read_text('utf-8')
  assert _run(*check).returncode == 0


def test_a_changed_number_in_the_doc_fails_the_check(tmp_path):
  _copy_fedasmu_doc(tmp_path)
  doc = tmp_path / 'docs' / 'results' / 'fedasmu.md'
  doc.write_text(
    doc.read_text('utf-8').replace('| FedAsync | 0.720 / 0.733 |', '| FedAsync | 0.721 / 0.733 |'),
    'utf-8',
  )
  diffs = results_docs.check(str(tmp_path))
  assert len(diffs) == 1 and '+| FedAsync | 0.720 / 0.733 |' in diffs[0]


@pytest.mark.parametrize(
  'flags, message',
  [
    ((), 'give exactly one of --check, --write and --render'),
    (('--check', '--write'), 'give exactly one of'),
    (('--render=/no/such/file.json',), 'cannot read the result file'),
  ],
)
def test_binary_errors_are_one_line_with_exit_code_2(flags, message):
  result = _run(_SCRIPT, *flags)
  assert result.returncode == 2
  assert result.stderr.startswith('error: ') and message in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1


def _doc(tmp_path, spec, body=''):
  path = tmp_path / 'doc.md'
  path.write_text(f'# Doc\n\n<!-- table: {spec} -->\n\n{body}\n\n<!-- end table -->\n', 'utf-8')
  return str(path)


def test_markers_name_a_known_renderer_and_a_result_file_of_its_kit(tmp_path):
  data = os.path.relpath(os.path.join(_REPO, 'docs', 'results', 'data', 'fedasmu_600s.json'), _REPO)
  cases = [
    ('fedasmu.no_such_table ' + data, 'is not allowed; allowed values'),
    ('fedasmu.results', 'needs a result file'),
    ('stragglers.table21 ' + data, 'renders stragglers results'),
    ('stragglers.round_time ' + data, 'is computed from code alone'),
    (f'fedasmu.results {data} seed=7', 'no record of'),
  ]
  for spec, message in cases:
    with pytest.raises(results_docs.DocsError, match=message):
      results_docs.check(_REPO, [_doc(tmp_path, spec)])
  with pytest.raises(results_data.ResultsDataError, match='cannot read'):
    results_docs.check(_REPO, [_doc(tmp_path, 'fedasmu.results docs/results/data/none.json')])
  unterminated = tmp_path / 'open.md'
  unterminated.write_text('<!-- recorded table -->\n\n| a |\n', 'utf-8')
  with pytest.raises(results_docs.DocsError, match=r'open.md:1: table marker without'):
    results_docs.check(_REPO, [str(unterminated)])


def test_several_result_files_merge_with_the_later_runs_replacing_earlier_ones(tmp_path):
  main = 'docs/results/data/stragglers.json'
  rerun = 'docs/results/data/stragglers_ema_warmup_num_updates.json'
  text = results_docs.render_spec(f'stragglers.table21 {main} {rerun}', _REPO)
  # FARe-DUST's row is the rerun's (73.5% straggler), every other row the main file's.
  assert '| FARe-DUST | 73.5% [72.2%, 75.4%] |' in text
  assert '| FedAdam + over-sel. | 81.5% [78.8%, 81.5%] |' in text
  assert text.count('| FARe-DUST |') == 1
  with pytest.raises(results_docs.DocsError, match='takes one result file'):
    results_docs.render_spec(f'runs {main} {rerun}', _REPO)
  with pytest.raises(results_docs.DocsError, match='renders stragglers results'):
    results_docs.render_spec(
      f'stragglers.table21 {main} docs/results/data/fedasmu_600s.json', _REPO
    )


def test_filters_keep_the_matching_records(tmp_path):
  data = 'docs/results/data/fedasmu_600s.json'
  text = results_docs.render_spec(f'fedasmu.results {data} method=fedbuff seed=0', _REPO)
  assert '| FedBuff | 0.734 |' in text and 'FedASMU |' not in text


def test_export_refuses_no_records_and_load_refuses_other_files(tmp_path):
  with pytest.raises(results_data.ResultsDataError, match='no finished run'):
    results_data.export(str(tmp_path / 'x.json'), 'fedasmu', [], {}, 'cmd')
  with pytest.raises(results_data.ResultsDataError, match='kit='):
    results_data.export(str(tmp_path / 'x.json'), 'fedavg', [{'a': 1}], {}, 'cmd')
  (tmp_path / 'other.json').write_text('{"records": [1]}', 'utf-8')
  with pytest.raises(results_data.ResultsDataError, match='not a result file'):
    results_data.load(str(tmp_path / 'other.json'))


def _fake_run(run_dir, final, best, time_to_target, status='completed', code=None):
  os.makedirs(run_dir)
  summary = {
    'status': status,
    'final_accuracy': final,
    'best_accuracy': best,
    'time_to_target': time_to_target,
    'target_accuracy': 0.7,
    'final_version': 120,
    'final_virtual_time': 600.0,
    'client_updates': 120,
    'host': {'seconds': 50.0, **({} if code is None else {'code': code})},
  }
  with open(os.path.join(run_dir, 'summary.json'), 'w', encoding='utf-8') as f:
    json.dump(summary, f)


def test_binary_exports_the_finished_runs_and_render_prints_their_tables(tmp_path):
  runs = tmp_path / 'runs'
  column = runs / 'fashion_mnist' / 'lenet5'
  code = {'commit': 'f' * 40, 'dirty': False, 'version': '0.1.0'}
  _fake_run(column / 'fedasmu' / 'seed0', 0.71, 0.72, 450.0, code=code)
  _fake_run(column / 'fedasmu' / 'seed1', 0.69, 0.70, None)
  _fake_run(column / 'fedavg' / 'seed0', 0.65, 0.66, None)
  (column / 'fedavg' / 'seed1').mkdir()  # started, never finished: not exported
  exported = tmp_path / 'data' / 'fedasmu_test.json'
  result = _run(
    _FEDASMU,
    '--num_rounds=500',
    '--max_virtual_time=600',
    f'--workdir={runs}',
    '--methods=fedasmu,fedavg',
    '--seeds=0,1',
    '--only_existing',
    f'--export={exported}',
  )
  assert result.returncode == 0, result.stderr
  assert f'exported: {exported} (3 runs)' in result.stdout
  data = results_data.load(str(exported))
  assert data['kit'] == 'fedasmu' and data['settings']['seeds'] == [0, 1]
  assert '--only_existing' in data['command'] and data['command'].endswith(f'--export={exported}')
  assert [(r['method'], r['seed'], r['final_accuracy']) for r in data['records']] == [
    ('fedasmu', 0, 0.71),
    ('fedavg', 0, 0.65),
    ('fedasmu', 1, 0.69),
  ]
  assert all('workdir' not in r and r['finished'].endswith('UTC') for r in data['records'])
  # Each run carries the code it ran on, as its summary recorded it (None: not recorded).
  assert [r['code'] for r in data['records']] == [code, None, None]
  # One record per line: a rerun shows in git diff run by run.
  assert len(exported.read_text('utf-8').splitlines()) == 8 + 3 + 2

  rendered = _run(_SCRIPT, f'--render={exported}', f'--root={tmp_path}')
  assert rendered.returncode == 0, rendered.stderr
  out = rendered.stdout
  names = (
    'runs',
    'fedasmu.results',
    'fedasmu.ordering',
    'fedasmu.ablations',
    'fedasmu.per_seed',
    'fedasmu.agreement',
  )
  for name in names:
    assert f'<!-- table: {name} data/fedasmu_test.json -->' in out
  assert out.count('<!-- end table -->') == len(names)
  assert '**Code:** commit fffffff (1 run); not recorded (2 runs).' in out
  assert '| FedASMU | 0.700±0.014 | 0.829 | 0.710 | / |' in out  # missed on one of two seeds
  assert '| FedAvg | 0.650 | 0.706 | 0.660 | / |' in out

  # Pasted into a doc, the rendered tables check clean, and fail once a run changes.
  doc = tmp_path / 'doc.md'
  doc.write_text('# Doc\n\n' + out, 'utf-8')
  assert results_docs.check(str(tmp_path), [str(doc)]) == []
  exported.write_text(exported.read_text('utf-8').replace('0.65', '0.55'), 'utf-8')
  assert results_docs.check(str(tmp_path), [str(doc)])


def test_binary_without_finished_runs_refuses_to_export(tmp_path):
  result = _run(
    _FEDASMU,
    '--num_rounds=500',
    f'--workdir={tmp_path / "runs"}',
    '--methods=fedasmu',
    '--only_existing',
    f'--export={tmp_path / "x.json"}',
  )
  assert result.returncode == 2
  assert 'no finished run to export' in result.stderr
  assert not (tmp_path / 'x.json').exists()


@pytest.mark.parametrize('export', ['', 'folder/', 'a_file/x.json'])
def test_an_unusable_export_path_stops_the_sweep_before_any_run(tmp_path, export):
  (tmp_path / 'a_file').write_text('not a folder', 'utf-8')
  (tmp_path / 'folder').mkdir()
  result = _run(
    _FEDASMU,
    '--num_rounds=500',
    f'--workdir={tmp_path / "runs"}',
    '--methods=fedasmu',
    f'--export={tmp_path / export}' if export else '--export=',
  )
  assert result.returncode == 2, result.stderr
  assert result.stderr.count('\n') == 1 and result.stderr.startswith('error: --export=')
  assert not (tmp_path / 'runs').exists()  # refused before the first run wrote anything


def test_export_replaces_the_file_whole(tmp_path, monkeypatch):
  path = tmp_path / 'x.json'
  path.write_text('old', 'utf-8')
  monkeypatch.setattr(os, 'fsync', lambda fd: (_ for _ in ()).throw(OSError(28, 'No space')))
  with pytest.raises(results_data.ResultsDataError, match='cannot write it'):
    results_data.export(str(path), 'fedasmu', [{'method': 'fedasmu'}], {}, 'cmd')
  assert path.read_text('utf-8') == 'old'  # a failed write leaves the previous file
  assert [p.name for p in tmp_path.iterdir()] == ['x.json']  # and no temporary file


@pytest.mark.parametrize(
  'codes, text',
  [
    (
      [None, None],
      'the commit each run ran on was not recorded (the runs predate that record); '
      'the file was exported at commit 1234567',
    ),
    (
      [{'commit': 'c' * 40, 'dirty': False, 'version': '0.1.0'}, None],
      'commit ccccccc (1 run); not recorded (1 run)',
    ),
    (
      [
        {
          'commit': 'c' * 40,
          'dirty': True,
          'version': '0.1.0',
          'earlier': [{'commit': 'd' * 40, 'dirty': False}],
        }
      ]
      * 2,
      'commit ccccccc with uncommitted changes, resumed from a checkpoint of commit ddddddd '
      '(2 runs)',
    ),
    (
      [{'commit': None, 'dirty': None, 'version': '0.1.0'}] * 2,
      'not in a git checkout (fedsim_jax 0.1.0) (2 runs)',
    ),
  ],
)
def test_the_runs_block_shows_the_recorded_code_or_says_it_was_not_recorded(codes, text):
  records = [
    {'seed': seed, 'finished': '2026-11-26 06:03 UTC', 'host_seconds': 60.0 * (seed + 1)}
    | ({} if code is None else {'code': code})
    for seed, code in enumerate(codes)
  ]
  data = {'kit': 'fedasmu', 'exported_at_commit': '1234567', 'records': records}
  block = results_docs.RENDERERS['runs'].render(data)
  assert block.startswith('**Runs:** 2 (seeds 0, 1); finished 2026-11-26 06:03 UTC; host time ')
  assert '60-120 s per run, 3 minutes in all' in block
  assert block.endswith(f'**Code:** {text}.')


def test_merged_result_files_replace_the_runs_of_the_same_method_and_seed():
  first = {
    'kit': 'stragglers',
    'records': [
      {'algorithm': 'fare_dust', 'latency': 'per_example', 'seed': 0, 'total_accuracy': 0.5},
      {'algorithm': 'fedavg', 'latency': 'per_example', 'seed': 0, 'total_accuracy': 0.8},
    ],
  }
  second = {
    'kit': 'stragglers',
    'records': [
      {'algorithm': 'fare_dust', 'latency': 'per_example', 'seed': 0, 'total_accuracy': 0.7},
      {'algorithm': 'fare_dust', 'latency': 'per_example', 'seed': 1, 'total_accuracy': 0.6},
    ],
  }
  merged = results_data.merge([first, second])
  assert [(r['algorithm'], r['seed'], r['total_accuracy']) for r in merged['records']] == [
    ('fare_dust', 0, 0.7),
    ('fedavg', 0, 0.8),
    ('fare_dust', 1, 0.6),
  ]
