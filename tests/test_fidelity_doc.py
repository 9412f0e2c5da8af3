"""docs/fidelity.md stays in step with the code: every registered algorithm has an entry, every
test the ledger cites exists, and the ledger points to no file outside the repository."""

import ast
import pathlib
import re

from fedsim_jax import algorithms

ROOT = pathlib.Path(__file__).resolve().parent.parent
LEDGER = ROOT / 'docs' / 'fidelity.md'

# A cited test: `tests/<path>.py::test_name` or `tests/<path>.py::TestClass::test_name`.
REFERENCE = re.compile(r'(tests/[\w/]+\.py)((?:::\w+)+)')
NAME = re.compile(r'`([a-z][a-z0-9_]*)`')


def entry_names(text: str) -> set[str]:
  """Names in backticks on the ledger's headings and in the first cell of its table rows."""
  names = set()
  for line in text.splitlines():
    if line.startswith('#'):
      names.update(NAME.findall(line))
    elif line.startswith('|'):
      names.update(NAME.findall(line.split('|')[1]))
  return names


def missing_entries(text: str, registered) -> list[str]:
  """The registered algorithms that have no entry in `text`."""
  return sorted(set(registered) - entry_names(text))


def references(text: str) -> list[tuple[str, tuple[str, ...]]]:
  """Every cited test as (file, (class..., function)), in order of appearance."""
  return [(path, tuple(node.split('::')[1:])) for path, node in REFERENCE.findall(text)]


def _defines(body: list[ast.stmt], parts: tuple[str, ...]) -> bool:
  """Whether `body` (a module's or a class's) defines the test `parts` names."""
  name, rest = parts[0], parts[1:]
  for statement in body:
    if rest and isinstance(statement, ast.ClassDef) and statement.name == name:
      return _defines(statement.body, rest)
    if (
      not rest
      and isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
      and statement.name == name
    ):
      return name.startswith('test_')
  return False


def stale_references(text: str, root: pathlib.Path) -> list[str]:
  """The cited tests whose file does not exist or does not define them."""
  stale = []
  trees: dict[str, ast.Module | None] = {}
  for path, parts in references(text):
    if path not in trees:
      file = root / path
      trees[path] = ast.parse(file.read_text()) if file.is_file() else None
    tree = trees[path]
    if tree is None or not _defines(tree.body, parts):
      stale.append('::'.join((path, *parts)))
  return sorted(set(stale))


def test_every_registered_algorithm_has_an_entry():
  assert missing_entries(LEDGER.read_text(), algorithms.names()) == []


def test_every_cited_test_exists():
  text = LEDGER.read_text()
  assert len(references(text)) > 100  # the ledger cites tests throughout
  assert stale_references(text, ROOT) == []


def test_the_ledger_points_to_no_file_outside_the_repository():
  text = LEDGER.read_text()
  for outside in ('/work/', 'shared/', 'specs/', 'papers/', '.txt'):
    assert outside not in text, outside


def test_the_checks_catch_a_missing_entry_and_a_stale_reference():
  text = (
    '### `fedavg`, `fedprox`\n'
    '| `moon` rule | `feddyn` (not a first cell) |\n'
    'FedBuff (`fedbuff`) is only mentioned here.\n'
    '`tests/strategy/test_fedopt.py::TestReducers::test_weighted_mean` (exists),\n'
    '`tests/strategy/test_fedopt.py::test_weighted_mean` (a method, not a module function),\n'
    '`tests/strategy/test_fedopt.py::TestReducers::test_gone` (renamed),\n'
    '`tests/strategy/test_gone.py::test_anything` (no such file),\n'
    '`tests/strategy/test_fedopt.py::TestReducers` (a class, not a test).\n'
  )
  assert missing_entries(text, ['fedavg', 'fedprox', 'moon', 'feddyn', 'fedbuff']) == [
    'fedbuff',
    'feddyn',
  ]
  assert stale_references(text, ROOT) == [
    'tests/strategy/test_fedopt.py::TestReducers',
    'tests/strategy/test_fedopt.py::TestReducers::test_gone',
    'tests/strategy/test_fedopt.py::test_weighted_mean',
    'tests/strategy/test_gone.py::test_anything',
  ]
