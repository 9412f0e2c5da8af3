"""The README's functional API example runs as written, on digits instead of Fashion-MNIST and
for fewer versions, and prints an accuracy the training reached."""

import os
import re

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _functional_api_example() -> str:
  with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  section = text[text.index('## Functional API') :]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def test_the_functional_api_example_trains_and_evaluates(digits_data_dir, capsys):
  code = _functional_api_example()
  assert "load_dataset('fashion_mnist', 'data')" in code and 'max_versions=50' in code
  code = code.replace(
    "load_dataset('fashion_mnist', 'data')", f"load_dataset('digits', {str(digits_data_dir)!r})"
  )
  code = code.replace('num_clients=100', 'num_clients=20').replace(
    'max_versions=50', 'max_versions=10'
  )
  namespace: dict = {}
  exec(compile(code, 'README.md', 'exec'), namespace)
  now, version, updates, accuracy = capsys.readouterr().out.split()
  assert int(version) == 10 and int(updates) == 100 and float(now) > 0
  assert float(accuracy) == namespace['accuracy'] > 0.5  # digits: well above chance (0.1)
