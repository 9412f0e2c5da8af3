"""Executes the notebooks in a real Jupyter kernel (nbclient), as the tests and a user do.

  .venv/bin/python notebooks/execute.py                 # every notebook, full size: outputs saved
  .venv/bin/python notebooks/execute.py --quick         # reduced sizes: nothing is written
  .venv/bin/python notebooks/execute.py notebooks/01_quickstart.ipynb --timeout 900

Each notebook runs in a fresh `python3` kernel whose working directory is the repository root,
so its relative paths (`DATA_DIR` defaults to `data`, runs go to `runs/notebooks/<name>/`) are
those of the README's commands and of `make data`. `--quick` sets `FEDSIM_NOTEBOOK_QUICK=1` in
the kernel's environment: the notebooks then use reduced sizes (the tests run them so) and the
.ipynb files are left as they are. Without `--quick` the notebooks run at full size and their
outputs, plots included, are written back into the .ipynb files: the committed outputs come from
this tool. Prints each notebook's execution time; exits 1 if a cell fails (its traceback is
printed), 0 otherwise.

From Python (the tests): `execute_notebook(path, quick=True, cwd=tmp, env={'DATA_DIR': ...})`.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS_DIR = os.path.join(ROOT, 'notebooks')
KERNEL = 'python3'
QUICK_ENV = 'FEDSIM_NOTEBOOK_QUICK'
DEFAULT_TIMEOUT = 600  # seconds per cell
# Set in the kernel's environment unless the caller's environment sets them: they keep
# execution-specific noise (TensorFlow's C++ logs where TensorFlow is installed) out of the stored
# outputs. They change no result.
QUIET_ENV = {'TF_CPP_MIN_LOG_LEVEL': '3'}


@dataclasses.dataclass(frozen=True)
class Executed:
  """A notebook after execution: the notebook with its outputs, and the seconds it took (kernel
  start included)."""

  notebook: nbformat.NotebookNode
  seconds: float


def notebook_paths() -> list[str]:
  """Every notebook in notebooks/, sorted by name."""
  return sorted(glob.glob(os.path.join(NOTEBOOKS_DIR, '*.ipynb')))


def kernel_env(quick: bool, env: Mapping[str, str] | None = None) -> dict[str, str]:
  """The kernel's environment: this process's, `QUIET_ENV` where unset, then `env`, with
  FEDSIM_NOTEBOOK_QUICK=1 for `quick` (removed otherwise)."""
  result = {**QUIET_ENV, **os.environ, **(env or {})}
  result.pop(QUICK_ENV, None)
  if quick:
    result[QUICK_ENV] = '1'
  return result


def execute_notebook(
  path: str | os.PathLike[str],
  *,
  quick: bool = False,
  timeout: int = DEFAULT_TIMEOUT,
  cwd: str | os.PathLike[str] = ROOT,
  env: Mapping[str, str] | None = None,
  output: str | os.PathLike[str] | None = None,
) -> Executed:
  """Runs every cell of the notebook at `path` in a fresh `python3` kernel.

  Args:
    path: the .ipynb file (read, never modified here).
    quick: reduced sizes (`FEDSIM_NOTEBOOK_QUICK=1` in the kernel's environment).
    timeout: seconds any one cell may run.
    cwd: the kernel's working directory (default: the repository root).
    env: variables added to the kernel's environment (e.g. DATA_DIR).
    output: where to write the executed notebook (nothing is written when None).

  Returns:
    The executed notebook and its execution time in seconds.

  Raises:
    CellExecutionError: a cell raised; its message holds the cell's source and traceback.
  """
  notebook = nbformat.read(os.fspath(path), as_version=4)
  client = NotebookClient(
    notebook,
    timeout=timeout,
    kernel_name=KERNEL,
    resources={'metadata': {'path': os.fspath(cwd)}},
    record_timing=False,  # no per-cell timestamps in the stored file
  )
  start = time.perf_counter()
  client.execute(env=kernel_env(quick, env))
  seconds = time.perf_counter() - start
  if output is not None:
    nbformat.write(notebook, os.fspath(output))
  return Executed(notebook, seconds)


def outputs_of(notebook: nbformat.NotebookNode) -> list[dict[str, Any]]:
  """Every output of every code cell, in order."""
  return [out for cell in notebook.cells if cell.cell_type == 'code' for out in cell.outputs]


def text_of(notebook: nbformat.NotebookNode) -> str:
  """All stream and text/plain output of the notebook, joined."""
  parts = []
  for out in outputs_of(notebook):
    if out.get('output_type') == 'stream':
      parts.append(out.get('text', ''))
    elif 'data' in out and 'text/plain' in out['data']:
      parts.append(out['data']['text/plain'])
  return '\n'.join(parts)


def images_of(notebook: nbformat.NotebookNode) -> int:
  """How many image/png outputs the notebook holds."""
  return sum('image/png' in out.get('data', {}) for out in outputs_of(notebook))


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog='notebooks/execute.py',
    description=(
      'Execute notebooks in a python3 Jupyter kernel (cwd: the repository root). Full size '
      'writes the outputs back into each .ipynb; --quick runs reduced sizes and writes nothing.'
    ),
  )
  parser.add_argument('paths', nargs='*', help='notebooks (default: notebooks/*.ipynb)')
  parser.add_argument(
    '--quick', action='store_true', help=f'reduced sizes ({QUICK_ENV}=1); writes nothing'
  )
  parser.add_argument(
    '--timeout', type=int, default=DEFAULT_TIMEOUT, help='seconds any one cell may run'
  )
  args = parser.parse_args(argv)
  paths = args.paths or notebook_paths()
  if not paths:
    print('no notebooks found', file=sys.stderr)
    return 1
  failed = []
  total = 0.0
  for path in paths:
    name = os.path.basename(path)
    try:
      executed = execute_notebook(path, quick=args.quick, timeout=args.timeout,
                                  output=None if args.quick else path)  # fmt: skip
    except CellExecutionError as e:
      print(f'{name}: FAILED\n{e}', file=sys.stderr)
      failed.append(name)
      continue
    total += executed.seconds
    saved = '' if args.quick else ', outputs saved'
    print(f'{name}: {executed.seconds:.1f} s ({"quick" if args.quick else "full"}{saved})')
  print(f'total: {total:.1f} s, {len(paths) - len(failed)} of {len(paths)} notebooks ran')
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
