"""Writes and checks the generated tables of docs/results/*.md.

  .venv/bin/python experiments/results_docs.py --check   # exit 1 with a diff where a table differs
  .venv/bin/python experiments/results_docs.py --write   # rewrite every generated table
  .venv/bin/python experiments/results_docs.py --render=docs/results/data/fedasmu_600s.json
      # print the tables of one result file between the markers to paste into a doc

A generated table sits between two marker lines, blank lines around it:

  <!-- table: fedasmu.results docs/results/data/fedasmu_600s.json -->

  | Method | ... |

  <!-- end table -->

The marker names a renderer of `RENDERERS` (the kits' table functions, `experiments/<kit>/
tables.py`) and, for tables of runs, the result file a reproduction binary wrote with `--export`
(`experiments/results_data.py`), relative to the repository root, optionally followed by
filters of its records (`seed=0`: the seed-0 runs alone). Several result files of one kit may
be named: a later file's runs replace the earlier files' runs of the same method, setting and
seed (`results_data.merge`), e.g. the main sweep with one method rerun under another setting. A
table computed from code alone, with no runs behind it (the latency models' tables), names no
file. A table whose runs are no longer kept is marked `<!-- recorded table -->` ...
`<!-- end table -->` instead, with a note in the doc saying how to rerun it; this script leaves
it as it is.

Renderers named `<kit>.*agreement` assess the paper's conclusions on the runs by the one rule
of `experiments/agreement.py`; `runs` (any kit) states where the runs come from: how many, when
they finished, their host time and the commit each ran on, as recorded (or that it was not).
Verdict words appear in the result docs only inside such generated tables.

Flags: `--docs` (comma list; default every docs/results/*.md) and `--root` (the repository root;
default this checkout). A missing or invalid result file, an unknown renderer or an unterminated
marker exits with code 2 and one line on stderr; `--check` exits with code 1 when a table differs.
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# As a script, Python puts this file's folder on sys.path, not the repo root with `experiments`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags

from experiments import results_data
from fedsim_jax import cli

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHECK = flags.DEFINE_bool('check', False, 'Exit 1 with a diff when a generated table differs.')
_WRITE = flags.DEFINE_bool('write', False, 'Rewrite the generated tables in the docs.')
_RENDER = flags.DEFINE_string(
  'render', None, 'Print every table of this result file between its markers; changes nothing.'
)
_DOCS = flags.DEFINE_string(
  'docs', '', 'Comma list of markdown files (default: every docs/results/*.md under --root).'
)
_ROOT = flags.DEFINE_string(
  'root', _REPO, 'Repository root; result files in markers are relative to it.'
)


class DocsError(ValueError):
  """A doc or marker that cannot be rendered; its message is one line."""


ANY_KIT = '*'


@dataclasses.dataclass(frozen=True)
class Renderer:
  """One generated table: `render(data)` gives its markdown from a result file's contents
  (`results_data.load`), or from nothing when `kit` is None (computed from code alone); `kit`
  `ANY_KIT` renders a result file of any kit. `applies(data)` says whether a result file has
  runs for it (`--render` prints only those)."""

  kit: str | None
  render: Callable[[Mapping[str, Any]], str]
  applies: Callable[[Mapping[str, Any]], bool] = lambda data: True
  merges: bool = True  # whether a marker may name several result files


def _fedasmu(name: str) -> Callable[[Mapping[str, Any]], str]:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.fedasmu import tables

    return getattr(tables, name)(data['records'])

  return render


def _fedcompass(name: str) -> Callable[[Mapping[str, Any]], str]:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.fedcompass import tables

    return getattr(tables, name)(data['records'])

  return render


def _stragglers_results(latency: str) -> Renderer:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.stragglers import tables

    return tables.results_table(data['records'], latency)

  def applies(data: Mapping[str, Any]) -> bool:
    return any(r.get('latency') == latency for r in data['records'])

  return Renderer('stragglers', render, applies)


def _stragglers_latency(data: Mapping[str, Any]) -> str:
  from experiments.stragglers import tables

  stats = data['settings'].get('latency_stats')
  if not stats:
    raise DocsError('stragglers.latency: the result file has no settings.latency_stats')
  return tables.latency_table(stats)


def _stragglers_latency_agreement(data: Mapping[str, Any]) -> str:
  from experiments.stragglers import tables

  return tables.latency_agreement()


def _stragglers_round_time(data: Mapping[str, Any]) -> str:
  from experiments.stragglers import tables

  return tables.round_time_table()


def _stragglers_agreement(latency: str) -> Renderer:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.stragglers import tables

    return tables.agreement_table(data['records'], latency)

  def applies(data: Mapping[str, Any]) -> bool:
    from experiments.stragglers import tables

    return bool(tables.claims(data['records'], latency))

  return Renderer('stragglers', render, applies)


def _ccfedavg(name: str, experiment: str) -> Renderer:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.ccfedavg import tables

    return getattr(tables, name)(data['records'])

  return Renderer('ccfedavg', render, lambda data: data['settings'].get('experiment') == experiment)


def _heterogeneity(name: str) -> Callable[[Mapping[str, Any]], str]:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.heterogeneity import tables

    return getattr(tables, name)(data['records'])

  return render


def _transforms(experiment: str, kind: str) -> Renderer:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.transforms import tables

    table, agreement_of = tables.TABLES[experiment]
    return (agreement_of if kind == 'agreement' else table)(data['records'])

  return Renderer(
    'transforms',
    render,
    lambda data: any(r.get('experiment') == experiment for r in data['records']),
  )


def _scaling_curve(curve: str) -> Renderer:
  def render(data: Mapping[str, Any]) -> str:
    from experiments.scaling import tables

    return tables.curve_table(data['records'], curve)

  return Renderer(
    'scaling', render, lambda data: any(r.get('curve') == curve for r in data['records'])
  )


def _scaling_growth(data: Mapping[str, Any]) -> str:
  from experiments.scaling import tables

  return tables.growth_table(data['records'])


def _scaling_setup(data: Mapping[str, Any]) -> str:
  from experiments.scaling import tables

  return tables.setup_table(dict(data['settings'], measured=data.get('exported')))


def _span(values: Sequence[float], unit: str, digits: int = 0) -> str:
  low, high = min(values), max(values)
  if round(low, digits) == round(high, digits):
    return f'{low:,.{digits}f} {unit}'
  return f'{low:,.{digits}f}-{high:,.{digits}f} {unit}'


def _code_text(code: Mapping[str, Any] | None) -> str:
  """A run's `code` record (`fedsim_jax.provenance`) in words."""
  if not code:
    return 'not recorded'
  if code.get('commit') is None:
    text = f'not in a git checkout (fedsim_jax {code.get("version", "unknown")})'
  else:
    text = f'commit {code["commit"][:7]}' + (
      ' with uncommitted changes' if code.get('dirty') else ''
    )
  earlier = code.get('earlier')
  if earlier:
    resumed = [_code_text(c) if c else 'code not recorded' for c in earlier]
    text += f', resumed from a checkpoint of {", ".join(resumed)}'
  return text


def _runs(data: Mapping[str, Any]) -> str:
  """Where a result file's runs come from: count, seeds, finish times, host time and code."""
  records = data['records']
  seeds = sorted({r['seed'] for r in records if r.get('seed') is not None})
  finished = sorted(r['finished'] for r in records if r.get('finished'))
  hosts = [r['host_seconds'] for r in records if r.get('host_seconds') is not None]
  parts = [f'**Runs:** {len(records)}']
  if seeds:
    parts[0] += f' (seed{"s" if len(seeds) > 1 else ""} {", ".join(map(str, seeds))})'
  if finished:
    parts.append(
      f'finished {finished[0]}'
      if finished[0] == finished[-1]
      else f'finished between {finished[0]} and {finished[-1]}'
    )
  if len(hosts) == 1:
    parts.append(f'host time {_span(hosts, "s")} (as the run recorded it)')
  elif hosts:
    total = sum(hosts)
    total_text = f'{total:,.0f} s' if total < 120 else f'{total / 60:,.0f} minutes'
    parts.append(
      f'host time {_span(hosts, "s")} per run, {total_text} in all (as each run recorded it, '
      'beside whatever else the machine ran)'
    )
  counts: dict[str, int] = {}
  for record in records:
    text = _code_text(record.get('code'))
    counts[text] = counts.get(text, 0) + 1
  if list(counts) == ['not recorded']:
    exported = data.get('exported_at_commit')
    exported = (
      'an unrecorded commit'
      if not exported
      else f'commit {exported.replace(" + changes", " with uncommitted changes")}'
    )
    code = (
      'the commit each run ran on was not recorded (the runs predate that record); the file '
      f'was exported at {exported}'
    )
  else:
    code = '; '.join(f'{text} ({n} run{"s" if n > 1 else ""})' for text, n in counts.items())
  return '; '.join(parts) + f'. **Code:** {code}.'


def _latency_table8(data: Mapping[str, Any]) -> str:
  """The output of `benchmarks/latency_table.py` (seeded; about 2 s)."""
  result = subprocess.run(
    [sys.executable, os.path.join('benchmarks', 'latency_table.py')],
    cwd=_REPO,
    capture_output=True,
    text=True,
  )
  if result.returncode != 0:
    tail = (result.stderr.strip().splitlines() or ['no output'])[-1]
    raise DocsError(f'benchmarks/latency_table.py failed: {tail}')
  return result.stdout.strip()


RENDERERS: dict[str, Renderer] = {
  'runs': Renderer(ANY_KIT, _runs, merges=False),
  'fedasmu.results': Renderer('fedasmu', _fedasmu('results_table')),
  'fedasmu.ordering': Renderer('fedasmu', _fedasmu('ordering_table')),
  'fedasmu.ablations': Renderer('fedasmu', _fedasmu('ablation_table')),
  'fedasmu.per_seed': Renderer('fedasmu', _fedasmu('per_seed_table')),
  'fedasmu.agreement': Renderer('fedasmu', _fedasmu('agreement_table')),
  'fedcompass.relative_time': Renderer('fedcompass', _fedcompass('relative_time_table')),
  'fedcompass.top_accuracy': Renderer('fedcompass', _fedcompass('top_accuracy_table')),
  'fedcompass.ordering': Renderer('fedcompass', _fedcompass('ordering_table')),
  'fedcompass.agreement': Renderer('fedcompass', _fedcompass('agreement_table')),
  'stragglers.table20': _stragglers_results('per_example'),
  'stragglers.table21': _stragglers_results('per_domain_per_example'),
  'stragglers.table20_agreement': _stragglers_agreement('per_example'),
  'stragglers.table21_agreement': _stragglers_agreement('per_domain_per_example'),
  'stragglers.latency': Renderer(
    'stragglers', _stragglers_latency, lambda data: bool(data['settings'].get('latency_stats'))
  ),
  'ccfedavg.table2': _ccfedavg('table2', 'table2'),
  'ccfedavg.table2_agreement': _ccfedavg('table2_agreement', 'table2'),
  'ccfedavg.table1': _ccfedavg('table1', 'table1'),
  'ccfedavg.table1_agreement': _ccfedavg('table1_agreement', 'table1'),
  'ccfedavg.compute': _ccfedavg('compute_table', 'table2'),
  'ccfedavg.figure5': _ccfedavg('figure5_table', 'figure5'),
  'heterogeneity.results': Renderer('heterogeneity', _heterogeneity('results_table')),
  'heterogeneity.agreement': Renderer('heterogeneity', _heterogeneity('agreement_table')),
  'transforms.privacy': _transforms('privacy', 'table'),
  'transforms.privacy_agreement': _transforms('privacy', 'agreement'),
  'transforms.attacks': _transforms('attacks', 'table'),
  'transforms.attacks_agreement': _transforms('attacks', 'agreement'),
  'transforms.compression': _transforms('compression', 'table'),
  'transforms.compression_agreement': _transforms('compression', 'agreement'),
  'scaling.setup': Renderer('scaling', _scaling_setup, merges=False),
  'scaling.cohort': _scaling_curve('cohort'),
  'scaling.clients': _scaling_curve('clients'),
  'scaling.model': _scaling_curve('model'),
  'scaling.evaluation': _scaling_curve('evaluation'),
  'scaling.growth': Renderer('scaling', _scaling_growth),
  # Computed from the latency models alone: no runs, no result file.
  'stragglers.round_time': Renderer(None, _stragglers_round_time),
  'stragglers.latency_agreement': Renderer(None, _stragglers_latency_agreement),
  'benchmarks.latency_table': Renderer(None, _latency_table8),
}

_REGION = re.compile(
  r'^<!-- (?P<kind>table: (?P<spec>[^\n]*?)|recorded table(?:: [^\n]*?)?) -->\n'
  r'(?P<body>.*?)^<!-- end table -->$',
  re.MULTILINE | re.DOTALL,
)
_OPENING = re.compile(r'^<!-- (table:|recorded table)', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Region:
  """One marked table of a doc: `spec` is None for a recorded table."""

  spec: str | None
  body: str
  start: int  # offsets of the whole region, markers included, in the doc's text
  end: int
  line: int  # of the opening marker, 1-based


def regions(text: str, path: str = '<doc>') -> list[Region]:
  """The marked tables of a doc's `text`.

  Raises:
    DocsError: an opening marker without its `<!-- end table -->`.
  """
  found = [
    Region(m.group('spec'), m.group('body'), m.start(), m.end(), text.count('\n', 0, m.start()) + 1)
    for m in _REGION.finditer(text)
  ]
  starts = {r.start for r in found}
  for match in _OPENING.finditer(text):
    if match.start() not in starts:
      line = text.count('\n', 0, match.start()) + 1
      raise DocsError(f'{path}:{line}: table marker without its <!-- end table -->')
  return found


def render_spec(spec: str, root: str, cache: dict[str, Any] | None = None) -> str:
  """The markdown of the marker `spec`: '<renderer> [<result file> ... [<key>=<value> ...]]',
  the files' runs merged (`results_data.merge`: a later file's runs replace an earlier file's of
  the same method, setting and seed), the `key=value` items keeping only the records whose `key`
  prints as `value` (e.g. `seed=0`).

  Raises:
    DocsError: an unknown renderer, a result file missing where one is needed (or given where
      none is), a result file of another kit, or filters that keep no record.
    results_data.ResultsDataError: a missing or invalid result file.
  """
  cache = {} if cache is None else cache
  name, *rest = spec.split()
  filters = [item.partition('=')[::2] for item in rest if '=' in item]
  paths = [item for item in rest if '=' not in item]
  renderer = RENDERERS.get(name)
  if renderer is None:
    raise DocsError(f'table {name!r} is not allowed; allowed values: {sorted(RENDERERS)}')
  if renderer.kit is None:
    if rest:
      raise DocsError(f'table {name!r} is computed from code alone; remove {" ".join(rest)!r}')
    return renderer.render({}).strip()
  if not paths:
    raise DocsError(f'table {name!r} needs a result file, e.g. docs/results/data/<sweep>.json')
  if len(paths) > 1 and not renderer.merges:
    raise DocsError(f'table {name!r} takes one result file; give each file its own marker')
  loaded = []
  for data_path in paths:
    full = os.path.join(root, data_path)
    if full not in cache:
      cache[full] = results_data.load(full)
    if renderer.kit not in (ANY_KIT, cache[full]['kit']):
      raise DocsError(
        f'table {name!r} renders {renderer.kit} results; {data_path} holds {cache[full]["kit"]}'
      )
    loaded.append(cache[full])
  if len({data['kit'] for data in loaded}) > 1:
    raise DocsError(f'table {spec!r}: the result files hold runs of different kits')
  data = loaded[0] if len(loaded) == 1 else results_data.merge(loaded)
  data_path = ' '.join(paths)
  if filters:
    records = [r for r in data['records'] if all(str(r.get(k)) == v for k, v in filters)]
    if not records:
      raise DocsError(f'table {spec!r}: no record of {data_path} has {dict(filters)}')
    data = dict(data, records=records)
  return renderer.render(data).strip()


def rendered_doc(text: str, path: str, root: str, cache: dict[str, Any] | None = None) -> str:
  """`text` with every generated table rendered anew (recorded tables kept as they are)."""
  cache = {} if cache is None else cache
  pieces, last = [], 0
  for region in regions(text, path):
    if region.spec is None:
      continue
    pieces.append(text[last : region.start])
    pieces.append(
      f'<!-- table: {region.spec} -->\n\n{render_spec(region.spec, root, cache)}\n\n'
      '<!-- end table -->'
    )
    last = region.end
  pieces.append(text[last:])
  return ''.join(pieces)


def doc_paths(root: str, docs: Sequence[str] = ()) -> list[str]:
  """`docs`, or every docs/results/*.md under `root`."""
  return list(docs) or sorted(glob.glob(os.path.join(root, 'docs', 'results', '*.md')))


def _rendered_docs(root: str, docs: Sequence[str]) -> Iterator[tuple[str, str, str]]:
  """`(path, text, rendered)` of every doc: its text now and with its tables rendered anew."""
  cache: dict[str, Any] = {}
  for path in doc_paths(root, docs):
    with open(path, encoding='utf-8') as f:
      text = f.read()
    yield path, text, rendered_doc(text, path, root, cache)


def check(root: str, docs: Sequence[str] = ()) -> list[str]:
  """A unified diff per doc whose generated tables differ from what their data give."""
  diffs = []
  for path, text, new in _rendered_docs(root, docs):
    if new != text:
      name = os.path.relpath(path, root)
      diffs.append(
        ''.join(
          difflib.unified_diff(
            text.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f'{name} (doc)',
            f'{name} (rendered from its data)',
          )
        )
      )
  return diffs


def write(root: str, docs: Sequence[str] = ()) -> list[str]:
  """Rewrites the generated tables of the docs (each file atomically); returns the paths that
  changed."""
  from fedsim_jax.metrics.writers import write_text  # Deferred: it loads JAX.

  changed = []
  for path, text, new in _rendered_docs(root, docs):
    if new != text:
      write_text(path, new)
      changed.append(path)
  return changed


def render_file(path: str, root: str) -> str:
  """Every table of the result file at `path` that has runs in it, each between its markers."""
  data = results_data.load(path)
  relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
  blocks = []
  for name, renderer in RENDERERS.items():
    if renderer.kit in (ANY_KIT, data['kit']) and renderer.applies(data):
      spec = f'{name} {relative}'
      blocks.append(
        f'<!-- table: {spec} -->\n\n{render_spec(spec, root, {os.path.join(root, relative): data})}'
        '\n\n<!-- end table -->'
      )
  return '\n\n'.join(blocks) + '\n'


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {list(argv[1:])}')
  modes = [name for name, flag in (('check', _CHECK), ('write', _WRITE)) if flag.value]
  modes += ['render'] if _RENDER.value else []
  if len(modes) != 1:
    cli.fail('give exactly one of --check, --write and --render=<result file>')
  root = os.path.abspath(_ROOT.value)
  docs = [d for d in (part.strip() for part in _DOCS.value.split(',')) if d]
  try:
    if _RENDER.value:
      print(render_file(_RENDER.value, root), end='')
      return
    if _WRITE.value:
      changed = write(root, docs)
      for path in changed:
        print(f'rewrote {os.path.relpath(path, root)}')
      print(f'{len(changed)} doc(s) changed')
      return
    diffs = check(root, docs)
  except (DocsError, results_data.ResultsDataError) as error:
    cli.fail(str(error))
  if diffs:
    print(''.join(diffs), end='')
    print(
      f'{len(diffs)} doc(s) differ from their data; run '
      '.venv/bin/python experiments/results_docs.py --write'
    )
    sys.exit(1)
  print(f'{len(doc_paths(root, docs))} doc(s) match their data')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
