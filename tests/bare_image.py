"""A GPU machine's bare Python environment, imitated from this one: a virtualenv whose
site-packages links only the distributions the machine comes with
(`benchmarks/accelerator_wheels.BARE` and what they require) and any named in addition (the
carried wheels), so that importing anything else fails in it as it would there."""

from __future__ import annotations

import os
import venv
from collections.abc import Iterable
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirement_closure(roots: Iterable[str]) -> set[str]:
  """The canonical names of `roots` and every installed distribution they require, with the
  extras each requirement asks for (requirements of other extras are left out)."""
  found: set[str] = set()
  todo: list[tuple[str, frozenset[str]]] = [(root, frozenset()) for root in roots]
  seen: set[tuple[str, frozenset[str]]] = set()
  while todo:
    name, extras = todo.pop()
    key = (canonicalize_name(name), extras)
    if key in seen:
      continue
    seen.add(key)
    try:
      dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
      continue  # not installed here
    found.add(key[0])
    for text in dist.requires or []:
      requirement = Requirement(text)
      marker = requirement.marker
      if marker is None or any(marker.evaluate({'extra': e}) for e in {'', *extras}):
        todo.append((requirement.name, frozenset(requirement.extras)))
  return found


def _link(source: str, target: str) -> None:
  if not os.path.lexists(target):
    os.symlink(source, target)


def _link_distribution(dist: metadata.Distribution, site: str) -> None:
  """Links `dist`'s top-level entries into `site`; in a namespace package (a folder without
  `__init__.py`, shared by several distributions) its own second-level entries only."""
  base = str(dist.locate_file(''))
  for file in dist.files or []:
    parts = file.parts
    if not parts or parts[0] == '..':
      continue  # scripts outside site-packages
    top = os.path.join(base, parts[0])
    namespace = os.path.isdir(top) and not os.path.exists(os.path.join(top, '__init__.py'))
    if namespace and len(parts) > 2 and not parts[0].endswith(('.dist-info', '.libs')):
      os.makedirs(os.path.join(site, parts[0]), exist_ok=True)
      _link(os.path.join(top, parts[1]), os.path.join(site, parts[0], parts[1]))
    else:
      _link(top, os.path.join(site, parts[0]))


def make_bare_venv(path: str, distributions: Iterable[str]) -> str:
  """A virtualenv at `path` (no pip) whose site-packages links this environment's installed
  `distributions` and nothing else; returns its python."""
  venv.create(path, with_pip=False, symlinks=True)
  python = os.path.join(path, 'bin', 'python')
  site = next(
    os.path.join(root, name)
    for root, dirs, _ in os.walk(os.path.join(path, 'lib'))
    for name in dirs
    if name == 'site-packages'
  )
  for name in sorted(distributions):
    try:
      dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
      continue
    _link_distribution(dist, site)
  return python
