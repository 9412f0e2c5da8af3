"""The shipped notebooks run top to bottom (their code cells, in one namespace)."""

import glob
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb')))


@pytest.mark.parametrize('path', NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv('DATA_DIR', str(tmp_path))
  with open(path) as f:
    cells = json.load(f)['cells']
  namespace = {'__name__': '__notebook__'}
  for cell in cells:
    if cell['cell_type'] == 'code':
      exec(compile(''.join(cell['source']), f'{path}:{cell["id"]}', 'exec'), namespace)
