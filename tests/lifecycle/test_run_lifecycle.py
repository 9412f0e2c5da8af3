"""The split of a run into its build step (`experiment.build_run`: writes nothing) and its life
in a workdir (`lifecycle.RunLifecycle`: everything that writes)."""

import json
import os
import time

from fedsim_jax import experiment
from fedsim_jax.lifecycle import OnDivergence, RunLifecycle, RunStatus, Workspace
from tests.helpers import make_tiny_config


def _files(path):
  return sorted(
    os.path.relpath(os.path.join(root, name), path)
    for root, _, names in os.walk(path)
    for name in names
  )


def test_building_a_run_writes_nothing(digits_data_dir, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = make_tiny_config('fedavg', digits_data_dir, **{'run.on_divergence': 'continue'})
  built = experiment.build_run(config)
  assert _files(tmp_path) == []
  parts = built.parts
  assert parts.simulation.version == 0 and parts.simulation.on_version is None
  assert parts.options.on_divergence is OnDivergence.CONTINUE
  assert parts.resolved_config['algorithm']['kwargs'] == parts.algorithm_settings.as_dict()


def test_a_lifecycle_runs_a_built_run_as_run_experiment_does(digits_data_dir, tmp_path):
  config = make_tiny_config('fedbuff', digits_data_dir)
  reference = experiment.run_experiment(config, tmp_path / 'reference')
  built = experiment.build_run(config)
  workspace = Workspace.claim(
    tmp_path / 'lifecycle', resume=False, overwrite=False, distributed_run=False
  )
  run = RunLifecycle(workspace, built.parts, resume=False, host_start=time.perf_counter())
  run.start()
  summary = run.run()
  assert summary['status'] == RunStatus.COMPLETED == 'completed'
  for name in ('metrics.jsonl', 'config.json', 'clients.json'):
    assert (tmp_path / 'lifecycle' / name).read_text() == (
      tmp_path / 'reference' / name
    ).read_text()
  assert summary['final_accuracy'] == reference['final_accuracy']


def test_a_status_reads_as_its_text():
  assert json.dumps({'status': RunStatus.INTERRUPTED}) == '{"status": "interrupted"}'
  assert f'{RunStatus.FAILED}' == str(RunStatus.FAILED) == 'failed'
  assert RunStatus('killed') is RunStatus.KILLED
