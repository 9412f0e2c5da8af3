"""Writes the golden outputs of every case in `cases.py` (run after a deliberate change of
results or a pinned-version bump, and say why in the commit; README.md in this folder):

  .venv/bin/python tests/goldens/record.py [case ...]
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import CASES, GOLDEN_DIR, environment, run_case  # noqa: E402


def main(names: list[str]) -> None:
  os.makedirs(GOLDEN_DIR, exist_ok=True)
  for name in names or sorted(CASES):
    with tempfile.TemporaryDirectory() as workdir:
      result = run_case(name, workdir)
    result['environment'] = environment()
    with open(os.path.join(GOLDEN_DIR, f'{name}.json'), 'w') as f:
      json.dump(result, f, indent=1, sort_keys=True)
      f.write('\n')
    print(name, result['metrics'][-1])


if __name__ == '__main__':
  main(sys.argv[1:])
