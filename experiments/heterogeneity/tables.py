"""The heterogeneity study's tables and its agreement with the papers' qualitative findings.

A run record (`run_record`) is the run's `setups.Cell`, its seed, its global test accuracy,
time to the target, and the per-client figures of its last evaluation (`client_accuracy_*`,
`personalized_accuracy_mean` after fine-tuning, `personal_model_accuracy_mean` for methods that
keep a model per client). `results_table` gives mean ± std over seeds per partition;
`agreement_table` assesses each paper's finding on the runs by the rule of
`experiments.agreement`, as directions, never levels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from experiments import agreement, sweep
from experiments import records as records_lib
from experiments.heterogeneity import setups

Record = records_lib.Record
METHOD_NAMES = {
  'fedavg': 'FedAvg',
  'fedprox': 'FedProx (mu 0.01)',
  'scaffold': 'SCAFFOLD',
  'fednova': 'FedNova',
  'qffl_q1': 'q-FFL (q 1)',
  'qffl_q5': 'q-FFL (q 5)',
  'ditto': 'Ditto (lambda 0.1)',
  'fedavg_bn': 'FedAvg, BN MLP',
  'fedbn': 'FedBN, BN MLP',
}
PARTITION_NAMES = {'dirichlet0.1': 'Dirichlet(0.1)', 'two_classes': 'two classes per client'}
CLIENT_FIELDS = (
  'client_accuracy_mean',
  'client_accuracy_std',
  'client_accuracy_p10',
  'client_accuracy_min',
  'personalized_accuracy_mean',
  'personal_model_accuracy_mean',
)
SMALL_COST_PP = 2.0  # q-FFL's "small cost in mean": at most this many points below FedAvg


def run_record(cell: setups.Cell, seed: int, summary: dict[str, Any], run_dir: str) -> dict:
  """One run's record (see the module's docstring)."""
  clients = summary.get('client_evaluation') or {}
  return dict(
    records_lib.base_record(cell, seed, summary, run_dir),
    time_to_target=summary.get('time_to_target'),
    final_virtual_time=summary.get('final_virtual_time'),
    target_accuracy=summary.get('target_accuracy'),
    **{field: clients.get(field) for field in CLIENT_FIELDS},
  )


def results_table(records: Iterable[Record]) -> str:
  """Markdown, one table per partition: rows methods; global test accuracy, the per-client
  distribution, personalized and own-model accuracy in % (mean ± std over seeds) and virtual
  seconds to the target."""
  groups = records_lib.group(records, lambda r: (r['partition'], r['method']))
  target = next((r.get('target_accuracy') for runs in groups.values() for r in runs), None)
  parts = []
  for partition in [p for p in setups.PARTITIONS if any(k[0] == p for k in groups)]:
    rows = []
    for method in [m for m in setups.METHODS if (partition, m) in groups]:
      runs = groups[(partition, method)]
      rows.append(
        [METHOD_NAMES[method], records_lib.percent(records_lib.values(runs, 'final_accuracy'))]
        + [records_lib.percent(records_lib.values(runs, field)) for field in CLIENT_FIELDS]
        + [records_lib.time_to_target_text(runs)]
      )
    header = [
      'Method',
      'global acc. %',
      'client mean %',
      'client std %',
      'client p10 %',
      'worst client %',
      'fine-tuned mean %',
      'own-model mean %',
      f'seconds to {100 * (target or 0):g}%',
    ]
    parts.append(f'**{PARTITION_NAMES[partition]}**\n\n' + sweep.markdown_table(header, rows))
  return '\n\n'.join(parts)


def _claim(
  claim: str,
  source: str,
  paper: str,
  quantity: str,
  side: str,
  seeds: records_lib.PerSeed,
  threshold: float = 0.0,
) -> agreement.Claim:
  return agreement.Claim(claim, source, paper, quantity, side, seeds, threshold, digits=1)


def claims(records: Iterable[Record]) -> dict[str, list[agreement.Claim]]:
  """{partition: the papers' findings on its runs} (a finding needs both methods' runs)."""
  groups = records_lib.group(records, lambda r: (r['partition'], r['method']))
  found: dict[str, list[agreement.Claim]] = {}
  for partition in setups.PARTITIONS:

    def runs(method: str) -> list[Record]:
      return groups.get((partition, method), [])

    def differ(first, second, key, second_key=None):
      return records_lib.paired_difference(
        runs(first), runs(second), records_lib.points(key), records_lib.points(second_key or key)
      )

    listed = []
    if runs('scaffold') and runs('fedavg'):
      listed.append(
        _claim(
          'SCAFFOLD is more accurate than FedAvg under strong heterogeneity',
          'Karimireddy et al. 2020, Sec. 7',
          'control variates remove client drift: SCAFFOLD beats FedAvg on dissimilar clients '
          'with several local steps',
          'SCAFFOLD − FedAvg, global test accuracy (pp)',
          '>',
          differ('scaffold', 'fedavg', 'final_accuracy'),
        )
      )
    if runs('fednova') and runs('fedavg') and partition in setups.UNEQUAL_STEPS:
      listed.append(
        _claim(
          'FedNova is more accurate than FedAvg with heterogeneous local steps',
          'Wang et al. 2020, Sec. 6',
          'normalised averaging removes the objective inconsistency of unequal local work',
          'FedNova − FedAvg, global test accuracy (pp)',
          '>',
          differ('fednova', 'fedavg', 'final_accuracy'),
        )
      )
    for method in ('qffl_q1', 'qffl_q5'):
      if not (runs(method) and runs('fedavg')):
        continue
      name = METHOD_NAMES[method]
      listed.append(
        _claim(
          f'{name} spreads client accuracies less than FedAvg',
          'Li et al. 2020 (q-FFL), Sec. 5.2',
          'larger q gives a more uniform accuracy distribution over clients',
          f'{name} − FedAvg, std of client accuracies (pp)',
          '<',
          differ(method, 'fedavg', 'client_accuracy_std'),
        )
      )
      listed.append(
        _claim(
          f'{name} costs little mean client accuracy (at most {SMALL_COST_PP:g} points)',
          'Li et al. 2020 (q-FFL), Sec. 5.2',
          'the fairer distribution keeps a similar average accuracy',
          f'{name} − FedAvg, mean client accuracy (pp)',
          '>',
          differ(method, 'fedavg', 'client_accuracy_mean'),
          threshold=-SMALL_COST_PP,
        )
      )
    if runs('ditto') and runs('fedavg'):
      listed.append(
        _claim(
          "Ditto's personalized models are more accurate on their clients than the global model",
          'Li et al. 2021 (Ditto), Sec. 5',
          "personalization raises the clients' test accuracy over a global model",
          "Ditto's own models − FedAvg's global model, mean client accuracy (pp)",
          '>',
          differ('ditto', 'fedavg', 'personal_model_accuracy_mean', 'client_accuracy_mean'),
        )
      )
    if runs('fedbn') and runs('fedavg_bn'):
      listed.append(
        _claim(
          'FedBN (local BatchNorm) is more accurate on its clients than FedAvg on the same model',
          'Li et al. 2021 (FedBN), Sec. 5',
          'keeping BN local outperforms FedAvg on non-IID clients (their shift is in features; '
          'here it is in labels)',
          'FedBN with own BN − FedAvg, mean client accuracy (pp)',
          '>',
          differ('fedbn', 'fedavg_bn', 'personal_model_accuracy_mean', 'client_accuracy_mean'),
        )
      )
    if listed:
      found[PARTITION_NAMES[partition]] = listed
  return found


def agreement_table(records: Iterable[Record]) -> str:
  return agreement.agreement_blocks(claims(records).items())


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
    '# Heterogeneity baselines, per client',
    f'Seeds {",".join(map(str, settings["seeds"]))}; {len(records)} runs; wall time '
    f'{wall_seconds:.0f}s.',
    results_table(records),
    agreement_table(records),
  ]
  sweep.write_text(output, '\n\n'.join(parts) + '\n')
