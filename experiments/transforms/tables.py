"""The privacy, robustness and compression study's tables and its agreement with the papers.

A run record (`run_record`) is the run's `setups.Cell` fields, its seed and what its summary
and metrics say: final and best test accuracy, epsilon spent, upload bytes, virtual time to
the target (`upload_bytes`: of one update as sent) and the evaluation curve (`curve`:
[version, virtual seconds, accuracy, epsilon]), each where its experiment reads it.

Tables (`privacy_table`, `attack_table`, `compression_table`) give mean ± std over seeds; the
`*_agreement` tables assess the cited papers' qualitative findings on the runs by the rule of
`experiments.agreement` (`privacy_claims`, `attack_claims`, `compression_claims`). The papers
ran other models, data and scales, so a claim compares a direction (more noise costs accuracy,
a robust aggregator beats the mean under attack, compression reaches a target sooner on a slow
link), never a level.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from experiments import agreement, sweep
from experiments import records as records_lib
from experiments.transforms import setups

ALGORITHM_NAMES = {'fedavg': 'FedAvg', 'fedbuff': 'FedBuff'}
AGGREGATOR_NAMES = {
  'mean': 'mean (no defence)',
  'median': 'coordinate-wise median',
  'trimmed_mean': 'trimmed mean (beta 0.2)',
  'krum': 'Krum',
  'multi_krum': 'Multi-Krum',
  'norm_bounding': 'norm bounding (M 0.5)',
  'centered_clipping': 'centered clipping (tau 0.5, L 3)',
}
ATTACK_NAMES = {'sign_flip': 'sign flip (s 3)', 'scaling': 'scaling (gamma 10)'}
COMPRESSOR_NAMES = {
  'none': 'dense float32',
  'top_k': 'top-1% + error feedback',
  'qsgd': 'QSGD, 16 levels',
}
# Where each aggregator comes from, for the claims' source column.
AGGREGATOR_SOURCES = {
  'median': 'Yin et al. 2018, Sec. 7',
  'trimmed_mean': 'Yin et al. 2018, Sec. 7',
  'krum': 'Blanchard et al. 2017, Sec. 5',
  'multi_krum': 'Blanchard et al. 2017, Sec. 5',
  'norm_bounding': 'Sun et al. 2019, Sec. 4',
  'centered_clipping': 'Karimireddy et al. 2021, Sec. 6',
}
# Attacks each defence claims to withstand: norm bounding is a defence against boosted
# (scaled) updates, not against bounded-norm sign flips.
DEFENDS = {name: tuple(setups.ATTACKS) for name in AGGREGATOR_SOURCES}
DEFENDS['norm_bounding'] = ('scaling',)
WITHIN_PP = 1.0  # "close to" in the compression claims: within this many accuracy points


def _curve(run_dir: str) -> list[list[float | None]]:
  from fedsim_jax.metrics.writers import read_metrics

  path = os.path.join(run_dir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  return [
    [row['version'], round(row['virtual_time'], 3), row['test_accuracy'], row.get('epsilon')]
    for row in read_metrics(path)
    if row.get('test_accuracy') is not None
  ]


def run_record(
  cell: setups.Cell, seed: int, summary: dict[str, Any], run_dir: str
) -> dict[str, Any]:
  """One run's record (see the module's docstring): what every experiment's tables read, and
  each experiment's own figures (the result files stay small)."""
  record = records_lib.base_record(cell, seed, summary, run_dir)
  record['final_version'] = summary.get('final_version')
  transforms = summary.get('transforms') or {}
  if cell.experiment == 'privacy':
    privacy = summary.get('privacy') or {}
    epsilon = privacy.get('epsilon')
    record.update(
      epsilon=None if epsilon is None or epsilon == float('inf') else epsilon,
      delta=privacy.get('delta'),
    )
  elif cell.experiment == 'attacks':
    record['malicious_clients'] = len(transforms.get('malicious_clients') or ())
  else:
    record.update(
      final_virtual_time=summary.get('final_virtual_time'),
      time_to_target=summary.get('time_to_target'),
      target_accuracy=summary.get('target_accuracy'),
      client_updates=summary.get('client_updates'),
      upload_bytes=transforms.get('upload_bytes'),
      download_bytes=transforms.get('download_bytes'),
      compression_ratio=transforms.get('compression_ratio'),
      # The findings read the accuracy at a server version.
      curve=_curve(run_dir),
    )
  return record


Record = records_lib.Record
_pct = records_lib.percent
_group = records_lib.group
_final_pp = records_lib.points('final_accuracy')


def _of(records: Iterable[Record], experiment: str) -> list[Record]:
  return [r for r in records if r.get('experiment') == experiment]


def _finals(runs: Sequence[Record]) -> list[float]:
  return records_lib.values(runs, 'final_accuracy')


# --- tables ---------------------------------------------------------------------------------


def privacy_table(records: Iterable[Record]) -> str:
  """Markdown: per algorithm and noise multiplier, epsilon spent (at delta = N^-1.1) and the
  final and best test accuracy in % over seeds."""
  groups = _group(_of(records, 'privacy'), lambda r: (r['algorithm'], r['noise_multiplier']))
  rows = []
  for algorithm, z in sorted(groups, key=lambda k: (k[0], -1.0 if k[1] is None else k[1])):
    runs = groups[(algorithm, z)]
    epsilons = [r['epsilon'] for r in runs if r.get('epsilon') is not None]
    releases = sorted({r['final_version'] for r in runs})
    rows.append(
      [
        ALGORITHM_NAMES[algorithm] if z is None else f'DP-{ALGORITHM_NAMES[algorithm]}',
        'non-private' if z is None else f'{z:g}',
        '∞' if not epsilons else f'{sweep.mean_std(epsilons)[0]:.2f}',
        ', '.join(map(str, releases)),
        _pct(_finals(runs)),
        _pct([r['best_accuracy'] for r in runs if r.get('best_accuracy') is not None]),
        str(len(runs)),
      ]
    )
  header = ['Method', 'z', 'epsilon', 'aggregations', 'final acc. %', 'best acc. %', 'seeds']
  return sweep.markdown_table(header, rows)


def _attack_columns(records: Sequence[Record]) -> list[tuple[str, float | None]]:
  cells = {(r['attack'], r['fraction']) for r in records}
  order = ['none', *setups.ATTACKS]
  return sorted(cells, key=lambda c: (order.index(c[0]), c[1] or 0.0))


def _attack_column_name(attack: str, fraction: float | None) -> str:
  return 'no attack' if attack == 'none' else f'{ATTACK_NAMES[attack]}, {100 * fraction:g}%'


def attack_table(records: Iterable[Record]) -> str:
  """Markdown, one table per algorithm: rows aggregators, columns attacks x fraction of
  malicious clients; final test accuracy in %, mean ± std over seeds."""
  runs = _of(records, 'attacks')
  parts = []
  for algorithm in [a for a in setups.ALGORITHMS if any(r['algorithm'] == a for r in runs)]:
    mine = [r for r in runs if r['algorithm'] == algorithm]
    columns = _attack_columns(mine)
    groups = _group(mine, lambda r: (r['robust'], r['attack'], r['fraction']))
    rows = []
    for robust in [a for a in setups.AGGREGATORS if any(r['robust'] == a for r in mine)]:
      rows.append(
        [AGGREGATOR_NAMES[robust]]
        + [_pct(_finals(groups.get((robust, *column), []))) for column in columns]
      )
    header = ['Aggregator'] + [_attack_column_name(*c) for c in columns]
    parts.append(f'**{ALGORITHM_NAMES[algorithm]}**\n\n' + sweep.markdown_table(header, rows))
  return '\n\n'.join(parts)


def compression_table(records: Iterable[Record]) -> str:
  """Markdown: per algorithm and compressor, bytes of one upload (and its share of the dense
  upload), server versions reached in the virtual-time budget, final test accuracy in %, and
  virtual seconds to the target accuracy, over seeds."""
  groups = _group(_of(records, 'compression'), lambda r: (r['algorithm'], r['compression']))
  order = list(setups.COMPRESSORS)
  rows = []
  for algorithm, compression in sorted(groups, key=lambda k: (k[0], order.index(k[1]))):
    runs = groups[(algorithm, compression)]
    upload = [r['upload_bytes'] for r in runs if r.get('upload_bytes')]
    ratio = [r['compression_ratio'] for r in runs if r.get('compression_ratio') is not None]
    versions = [r['final_version'] for r in runs]
    rows.append(
      [
        ALGORITHM_NAMES[algorithm],
        COMPRESSOR_NAMES[compression],
        f'{sweep.mean_std(upload)[0]:,.0f}' if upload else 'n/a',
        f'{100 * sweep.mean_std(ratio)[0]:.1f}%' if ratio else 'n/a',
        f'{min(versions):,}-{max(versions):,}',
        _pct(_finals(runs)),
        records_lib.time_to_target_text(runs),
      ]
    )
  target = next((r.get('target_accuracy') for r in _of(records, 'compression')), None)
  header = [
    'Method',
    'upload',
    'bytes per upload',
    'of dense',
    'versions',
    'final acc. %',
    f'seconds to {100 * (target or 0):g}%',
  ]
  return sweep.markdown_table(header, rows)


# --- the papers' findings, assessed ----------------------------------------------------------


def _difference(
  first: Sequence[Record], second: Sequence[Record], value=_final_pp
) -> dict[int, agreement.Value | None]:
  return records_lib.paired_difference(first, second, value)


def privacy_claims(records: Iterable[Record]) -> dict[str, list[agreement.Claim]]:
  """{algorithm: DP-FedAvg's findings (McMahan et al. 2018) on these runs}."""
  groups = _group(_of(records, 'privacy'), lambda r: (r['algorithm'], r['noise_multiplier']))
  found: dict[str, list[agreement.Claim]] = {}
  for algorithm in setups.ALGORITHMS:
    levels = sorted(z for a, z in groups if a == algorithm and z is not None)
    plain = groups.get((algorithm, None))
    claims = []
    name = ALGORITHM_NAMES[algorithm]
    if plain and levels:
      z = levels[-1]
      claims.append(
        agreement.Claim(
          claim=f'Noise costs accuracy: DP-{name} at z = {z:g} is less accurate than {name}',
          source='McMahan et al. 2018, Sec. 4',
          paper='accuracy falls below the non-private model as the noise grows at a fixed '
          'expected cohort',
          quantity=f'DP-{name} (z {z:g}) − {name}, final accuracy (pp)',
          side='<',
          seeds=_difference(groups[(algorithm, z)], plain),
          digits=1,
        )
      )
    if len(levels) >= 2:
      low, high = levels[0], levels[-1]
      claims.append(
        agreement.Claim(
          claim=f'More noise, less accuracy: DP-{name} at z = {high:g} is less accurate '
          f'than at z = {low:g}',
          source='McMahan et al. 2018, Sec. 4',
          paper='the privacy-utility trade-off: a larger noise multiplier (smaller epsilon) '
          'gives a less accurate model',
          quantity=f'z {high:g} − z {low:g}, final accuracy (pp)',
          side='<',
          seeds=_difference(groups[(algorithm, high)], groups[(algorithm, low)]),
          digits=1,
        )
      )
    if claims:
      found[name] = claims
  shared = sorted(
    z for a, z in groups if a == 'fedbuff' and z is not None and ('fedavg', z) in groups
  )
  if shared:
    z = shared[-1]
    found['DP-FedBuff against DP-FedAvg'] = [
      agreement.Claim(
        claim=f'Under DP, buffered asynchronous aggregation is at least as accurate as '
        f'synchronous FedAvg (z = {z:g}, same client updates)',
        source='Nguyen et al. 2022, Sec. 6',
        paper='DP-FedBuff matches or beats DP-FedAvgM (their comparison is at equal epsilon, '
        'with their own K and cohort)',
        quantity=f'DP-FedBuff − DP-FedAvg (z {z:g}), final accuracy (pp)',
        side='>',
        threshold=-WITHIN_PP,
        seeds=_difference(groups[('fedbuff', z)], groups[('fedavg', z)]),
        digits=1,
      )
    ]
  return found


def attack_claims(records: Iterable[Record]) -> dict[str, list[agreement.Claim]]:
  """{'<algorithm>, <attack> <fraction>': the robustness papers' findings on these runs}: the
  mean loses accuracy under attack (Blanchard et al. 2017, Lemma 1), and each robust
  aggregator that claims to withstand the attack is more accurate than the mean under it."""
  runs = _of(records, 'attacks')
  groups = _group(runs, lambda r: (r['algorithm'], r['robust'], r['attack'], r['fraction']))
  found: dict[str, list[agreement.Claim]] = {}
  for algorithm in setups.ALGORITHMS:
    name = ALGORITHM_NAMES[algorithm]
    clean = groups.get((algorithm, 'mean', 'none', None))
    for attack, fraction in _attack_columns([r for r in runs if r['algorithm'] == algorithm]):
      if attack == 'none':
        continue
      attacked_mean = groups.get((algorithm, 'mean', attack, fraction))
      label = f'{name}, {_attack_column_name(attack, fraction)}'
      claims = []
      if attacked_mean and clean:
        claims.append(
          agreement.Claim(
            claim='The mean is not robust: the attack lowers its accuracy',
            source='Blanchard et al. 2017, Lemma 1',
            paper='no linear combination of the updates tolerates a single Byzantine worker',
            quantity='attacked − unattacked mean, final accuracy (pp)',
            side='<',
            seeds=_difference(attacked_mean, clean),
            digits=1,
          )
        )
      for robust, source in AGGREGATOR_SOURCES.items():
        defended = groups.get((algorithm, robust, attack, fraction))
        if not defended or not attacked_mean or attack not in DEFENDS[robust]:
          continue
        claims.append(
          agreement.Claim(
            claim=f'{AGGREGATOR_NAMES[robust]} withstands the attack better than the mean',
            source=source,
            paper='the robust rule keeps accuracy under attack where averaging loses it',
            quantity=f'{robust} − mean, final accuracy under attack (pp)',
            side='>',
            seeds=_difference(defended, attacked_mean),
            digits=1,
          )
        )
      if claims:
        found[label] = claims
  return found


def _accuracy_at_version(record: Record, version: int) -> agreement.Value | None:
  """The run's test accuracy (pp) at its last evaluation at or before `version`."""
  points = [p for p in record.get('curve') or () if p[0] <= version and p[2] is not None]
  return agreement.exact(100 * points[-1][2]) if points else None


def compression_claims(records: Iterable[Record]) -> dict[str, list[agreement.Claim]]:
  """{algorithm: the compression papers' findings on these runs}: on a bandwidth-limited link a
  compressed run reaches the target sooner in virtual time (Alistarh et al. 2017; Lin et al.
  2018), and at the dense run's number of server versions it is within `WITHIN_PP` points of
  the dense run's accuracy (unbiased quantization: Alistarh et al. 2017; error feedback: Stich
  et al. 2018)."""
  groups = _group(_of(records, 'compression'), lambda r: (r['algorithm'], r['compression']))
  found: dict[str, list[agreement.Claim]] = {}
  sources = {
    'qsgd': ('Alistarh et al. 2017, Sec. 5', 'Alistarh et al. 2017, Theorem 3.2'),
    'top_k': ('Lin et al. 2018, Sec. 5', 'Stich et al. 2018, Theorem 2.4'),
  }
  for algorithm in setups.ALGORITHMS:
    dense = groups.get((algorithm, 'none'))
    if not dense:
      continue
    by_seed = {int(r['seed']): r for r in dense}
    claims = []
    for compression, (time_source, rate_source) in sources.items():
      compressed = groups.get((algorithm, compression))
      if not compressed:
        continue
      title = COMPRESSOR_NAMES[compression]

      def seconds(r: Record) -> agreement.Value | None:
        return agreement.time_value(r.get('time_to_target'), r.get('final_virtual_time'))

      claims.append(
        agreement.Claim(
          claim=f'{title} reaches the target accuracy in less virtual time than dense uploads',
          source=time_source,
          paper='on a communication-bound link, fewer bytes per update shorten training to a '
          'given accuracy',
          quantity=f'{compression} − dense, seconds to the target',
          side='<',
          seeds=_difference(compressed, dense, seconds),
          digits=0,
        )
      )
      at_dense = {
        int(r['seed']): agreement.difference(
          _accuracy_at_version(r, by_seed[int(r['seed'])]['final_version']),
          _final_pp(by_seed[int(r['seed'])]),
        )
        for r in compressed
        if int(r['seed']) in by_seed
      }
      claims.append(
        agreement.Claim(
          claim=f'{title} loses at most {WITHIN_PP:g} point of accuracy at the same number of '
          'server versions',
          source=rate_source,
          paper='the compressed method converges at the rate of uncompressed SGD',
          quantity=f"{compression} − dense at the dense run's last version, accuracy (pp)",
          side='>',
          threshold=-WITHIN_PP,
          seeds=at_dense,
          digits=1,
        )
      )
    found[ALGORITHM_NAMES[algorithm]] = claims
  return found


def privacy_agreement(records: Iterable[Record]) -> str:
  return agreement.agreement_blocks(privacy_claims(records).items())


def attack_agreement(records: Iterable[Record]) -> str:
  return agreement.agreement_blocks(attack_claims(records).items())


def compression_agreement(records: Iterable[Record]) -> str:
  return agreement.agreement_blocks(compression_claims(records).items())


TABLES = {
  'privacy': (privacy_table, privacy_agreement),
  'attacks': (attack_table, attack_agreement),
  'compression': (compression_table, compression_agreement),
}


def write_outputs(
  records: Sequence[dict[str, Any]],
  settings: dict[str, Any],
  workdir: str,
  output: str,
  wall_seconds: float,
) -> None:
  """Writes `<workdir>/results.jsonl` and the markdown tables to `output`."""
  sweep.write_results(records, workdir)
  parts = [
    f'# Privacy, robustness and compression: {settings["experiment"]}',
    f'Seeds {",".join(map(str, settings["seeds"]))}; {len(records)} runs; wall time '
    f'{wall_seconds:.0f}s.',
  ]
  table, agreement_of = TABLES[settings['experiment']]
  parts += [table(records), agreement_of(records)]
  sweep.write_text(output, '\n\n'.join(parts) + '\n')
