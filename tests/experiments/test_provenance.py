"""Each run records the code it ran on: summary.json `host.code` (`fedsim_jax.provenance`)."""

import json
import os
import subprocess

from fedsim_jax import provenance
from fedsim_jax.checkpointing import Checkpoints
from fedsim_jax.experiment import PreparedRun, run_experiment
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _git(*args):
  return subprocess.run(['git', *args], cwd=_REPO, capture_output=True, text=True, check=True)


def test_a_run_records_the_commit_and_state_of_its_checkout(digits_data_dir, tmp_path):
  summary = run_experiment(make_tiny_config('fedavg', digits_data_dir), tmp_path)
  head = _git('rev-parse', 'HEAD').stdout.strip()
  dirty = bool(_git('status', '--porcelain', '--untracked-files=no').stdout.strip())
  assert summary['host']['code'] == {
    'commit': head,
    'dirty': dirty,
    'version': provenance.package_version(),
  }
  with open(tmp_path / 'summary.json', encoding='utf-8') as f:
    assert json.load(f)['host']['code'] == summary['host']['code']


def test_outside_a_git_checkout_the_version_alone_names_the_code(tmp_path, monkeypatch):
  (tmp_path / '__init__.py').write_text('', 'utf-8')  # a copy of the package, not in git
  monkeypatch.setattr(provenance, '_PACKAGE_DIR', str(tmp_path))
  provenance.code_version.cache_clear()
  try:
    code = provenance.code_version()
  finally:
    provenance.code_version.cache_clear()
  assert code == {'commit': None, 'dirty': None, 'version': provenance.package_version()}


def test_a_run_resumed_on_other_code_records_the_earlier_code(
  digits_data_dir, tmp_path, monkeypatch
):
  config = make_tiny_config(
    'fedavg', digits_data_dir, **{'run.num_rounds': 6, 'run.checkpoint_every': 2}
  )
  old = {'commit': 'a' * 40, 'dirty': False, 'version': '0.1.0'}
  new = {'commit': 'b' * 40, 'dirty': True, 'version': '0.1.0'}
  monkeypatch.setattr('fedsim_jax.lifecycle.run_lifecycle.code_version', lambda: old)
  first = PreparedRun(config, tmp_path)
  sim = first.simulation
  while not first._checkpoint_requested:
    sim.run(first.stop)
  first.save_checkpoint()
  first.writer.close()
  first._lock.release()  # abandoned as a killed process would leave it
  assert Checkpoints(str(tmp_path / 'checkpoints')).load_latest().state['run']['code'] == [old]
  monkeypatch.setattr('fedsim_jax.lifecycle.run_lifecycle.code_version', lambda: new)
  summary = run_experiment(config, tmp_path, resume=True)
  assert summary['host']['code'] == dict(new, earlier=[old])


def test_code_record_lists_each_differing_earlier_code_once():
  a, b = {'commit': 'a'}, {'commit': 'b'}
  assert provenance.code_record([a]) == a
  assert provenance.code_record([a, a]) == a  # resumed on the same code
  assert provenance.code_record([b, b, a]) == dict(a, earlier=[b])
  assert provenance.code_record([None, a]) == dict(a, earlier=[None])  # before the record
