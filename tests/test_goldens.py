"""Golden runs (tests/goldens/cases.py): every shipped config on a tiny budget and small runs of
the most involved algorithm families give exactly the committed metrics rows, task accounting
and final parameters.

Bits are compared where the goldens were recorded with the same JAX build on a CPU with the same
instruction set (XLA:CPU's floating-point results depend on both); elsewhere floats are compared
to 1e-6 relative and the parameter digests are not compared.
Rerecord deliberately with `.venv/bin/python tests/goldens/record.py [case ...]`; when and what
to check: tests/goldens/README.md.
"""

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'goldens'))

from cases import CASES, GOLDEN_DIR, SHIPPED_CONFIGS, environment, load_config_file, run_case  # noqa: E402

from fedsim_jax.config import validate  # noqa: E402


def _load_golden(name):
  with open(os.path.join(GOLDEN_DIR, f'{name}.json')) as f:
    return json.load(f)


def _assert_close(actual, expected, path=''):
  if isinstance(expected, dict):
    assert set(actual) == set(expected), path
    for key in expected:
      _assert_close(actual[key], expected[key], f'{path}.{key}')
  elif isinstance(expected, list):
    assert len(actual) == len(expected), path
    for i, (a, e) in enumerate(zip(actual, expected)):
      _assert_close(a, e, f'{path}[{i}]')
  elif isinstance(expected, float):
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-9, err_msg=path)
  else:
    assert actual == expected, path


def test_every_case_has_a_golden():
  assert sorted(f[:-5] for f in os.listdir(GOLDEN_DIR)) == sorted(CASES)


@pytest.mark.parametrize('path', SHIPPED_CONFIGS, ids=os.path.basename)
def test_shipped_configs_are_valid_as_shipped(path):
  validate(load_config_file(path))


@pytest.mark.parametrize('name', sorted(CASES))
def test_case_matches_its_golden(name, tmp_path):
  golden = _load_golden(name)
  recorded_environment = golden.pop('environment')
  result = json.loads(json.dumps(run_case(name, str(tmp_path))))  # the golden's float forms
  assert result['metrics'][-1]['version'] > 0
  if recorded_environment == environment():
    assert result == golden
  else:
    for digest in ('params', 'eval_params'):
      golden[digest].pop('sha256')
      result[digest].pop('sha256')
    _assert_close(result, golden)
