"""The code a run ran on, so that every result can be traced to it.

`code_version()` gives the git commit of the checkout fedsim_jax is imported from, whether that
checkout had uncommitted changes to tracked files, and the package version. Outside a git
checkout (an installed wheel, or no `git` on the path) the commit and the state are None and the
version alone names the code. `summary.json` records it under `host.code` (`code_record`),
together with the code of the earlier processes of a run resumed from a checkpoint written by
other code. It sits with the host figures because, like them, it describes how a result was
produced, not the result: a resumed run equals the unbroken one in everything else.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import subprocess
from collections.abc import Sequence
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _git(*args: str) -> str:
  return subprocess.run(
    ['git', *args], cwd=_PACKAGE_DIR, capture_output=True, text=True, check=True, timeout=60
  ).stdout.strip()


def package_version() -> str:
  """The installed distribution's version, or 'unknown' for a source tree that was never
  installed."""
  try:
    return importlib.metadata.version('fedsim_jax')
  except importlib.metadata.PackageNotFoundError:
    return 'unknown'


@functools.cache
def code_version() -> dict[str, Any]:
  """{'commit': the checkout's HEAD (40 hex digits) or None, 'dirty': whether tracked files had
  uncommitted changes (None outside a checkout), 'version': `package_version()`}.

  Read once per process: the code a process runs is the code it imported when it started.
  """
  version = package_version()
  try:
    # The package's own files must be tracked: a virtualenv inside some other checkout is not it.
    if _git('ls-files', '--', '__init__.py') != '__init__.py':
      return {'commit': None, 'dirty': None, 'version': version}
    commit = _git('rev-parse', 'HEAD')
    dirty = bool(_git('status', '--porcelain', '--untracked-files=no'))
  except (OSError, subprocess.SubprocessError):
    return {'commit': None, 'dirty': None, 'version': version}
  return {'commit': commit, 'dirty': dirty, 'version': version}


def code_record(processes: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
  """What `summary.json` records under `host.code`: the code of the run's last process
  (`processes[-1]`, a `code_version()`), plus `earlier`, the code of each earlier process that
  differs from it (None: a process before a checkpoint that predates this record), when any
  does. A run that never resumed, or resumed on the same code, has no `earlier`."""
  *earlier, last = processes
  record = dict(last or {'commit': None, 'dirty': None, 'version': 'unknown'})
  different: list[dict[str, Any] | None] = []
  for code in earlier:
    if code != last and code not in different:
      different.append(code)
  if different:
    record['earlier'] = different
  return record
