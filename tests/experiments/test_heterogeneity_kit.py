"""The heterogeneity study: every config valid, the tables and the papers' findings on
hand-made records, and the binary's flag errors."""

import os
import subprocess
import sys

import pytest

from experiments import agreement
from experiments.heterogeneity import setups, tables
from fedsim_jax.experiment import validate
from fedsim_jax.run_spec import RunSpec

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BINARY = os.path.join(_REPO, 'experiments', 'heterogeneity', 'reproduce.py')


@pytest.mark.parametrize('cell', setups.cells(), ids=lambda c: f'{c.partition}-{c.method}')
def test_every_config_is_valid_and_evaluates_per_client(cell):
  config = setups.make_config(cell, seed=1, data_dir='/nonexistent')
  validate(config)
  spec = RunSpec.from_config(config)
  algorithm, kwargs, model, model_kwargs = setups.METHODS[cell.method]
  assert spec.algorithm.name == algorithm and spec.model.name == model
  for name, value in kwargs.items():
    assert getattr(spec.algorithm.settings, name) == value
  assert spec.partition.name == setups.PARTITIONS[cell.partition][0]
  assert spec.data.client_test == 'held_out' and spec.run.eval_personalization_steps == 5
  assert spec.client.local_epochs == 1.0 and spec.client.local_steps is None
  # FedBN and its baseline share the BatchNorm model; the others the plain MLP.
  assert spec.model.settings.norm == ('batch' if cell.method in ('fedbn', 'fedavg_bn') else 'none')


def _records():
  figures = {  # method: (global, client mean, client std, own model), on 3 seeds
    'fedavg': ([0.70, 0.72, 0.71], [0.70, 0.71, 0.72], [0.20, 0.22, 0.21], None),
    'scaffold': ([0.75, 0.76, 0.74], [0.74, 0.75, 0.76], [0.18, 0.19, 0.2], None),
    'qffl_q5': ([0.69, 0.70, 0.69], [0.69, 0.70, 0.71], [0.12, 0.13, 0.12], None),
    'ditto': ([0.70, 0.72, 0.71], [0.70, 0.71, 0.72], [0.2, 0.2, 0.2], [0.9, 0.91, 0.92]),
  }
  records = []
  for method, (final, mean, std, own) in figures.items():
    for seed in range(3):
      records.append(
        dict(
          setups.Cell('dirichlet0.1', method).record(),
          seed=seed,
          final_accuracy=final[seed],
          client_accuracy_mean=mean[seed],
          client_accuracy_std=std[seed],
          client_accuracy_p10=mean[seed] - 0.3,
          client_accuracy_min=mean[seed] - 0.5,
          personalized_accuracy_mean=0.95,
          personal_model_accuracy_mean=None if own is None else own[seed],
          time_to_target=100.0 * (seed + 1),
          final_virtual_time=1000.0,
          target_accuracy=0.7,
        )
      )
  return records


def test_results_table():
  table = tables.results_table(_records())
  assert '**Dirichlet(0.1)**' in table
  assert (
    '| SCAFFOLD | 75.0 ± 1.0 | 75.0 ± 1.0 | 19.0 ± 1.0 | 45.0 ± 1.0 | 25.0 ± 1.0 | 95.0 ± 0.0 | n/a | 200 |'
    in table
  )
  assert '| Ditto (lambda 0.1) | 71.0 ± 1.0 | 71.0 ± 1.0 | 20.0 ± 0.0 |' in table
  assert '| 91.0 ± 1.0 | 200 |' in table
  assert 'seconds to 70%' in table


def test_the_papers_findings():
  found = tables.claims(_records())
  assert list(found) == ['Dirichlet(0.1)']
  by_claim = {c.claim: c for c in found['Dirichlet(0.1)']}
  scaffold = by_claim['SCAFFOLD is more accurate than FedAvg under strong heterogeneity']
  assert {s: round(v.value, 6) for s, v in scaffold.seeds.items()} == {0: 5, 1: 4, 2: 3}
  assert agreement.assess(scaffold).verdict == agreement.AGREES
  spread = by_claim['q-FFL (q 5) spreads client accuracies less than FedAvg']
  assert agreement.assess(spread).verdict == agreement.AGREES
  cost = by_claim['q-FFL (q 5) costs little mean client accuracy (at most 2 points)']
  assert (cost.side, cost.threshold) == ('>', -2.0)
  assert agreement.assess(cost).verdict == agreement.AGREES  # -1 on every seed: within 2 points
  ditto = by_claim[
    "Ditto's personalized models are more accurate on their clients than the global model"
  ]
  assert {s: round(v.value, 6) for s, v in ditto.seeds.items()} == {0: 20, 1: 20, 2: 20}
  # No FedNova, FedBN or q = 1 runs: no finding about them.
  assert not any('FedNova' in c or 'FedBN' in c or '(q 1)' in c for c in by_claim)


@pytest.mark.parametrize(
  'flag', ['--methods=fedavg,fedsgd', '--partitions=iid', '--rounds=0', '--seeds=']
)
def test_binary_rejects_bad_flags_with_one_line(flag, tmp_path):
  result = subprocess.run(
    [sys.executable, _BINARY, flag, f'--workdir={tmp_path}'],
    capture_output=True,
    text=True,
    cwd=_REPO,
    timeout=120,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert not os.listdir(tmp_path)
