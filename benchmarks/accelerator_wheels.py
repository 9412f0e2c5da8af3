"""Downloads the wheels `benchmarks/accelerator_check.py` needs on a bare GPU machine.

  .venv/bin/python benchmarks/accelerator_wheels.py [--dest=.accelerator_wheels]   # or
  make accelerator-wheels

A lent GPU machine reaches no package index and comes with JAX, flax, optax, chex,
orbax-checkpoint and matplotlib (and what they require) only. The check imports two packages
beyond those (`WHEELS`); the rest of fedsim's dependencies (tensorflow-datasets, array_record,
tensorboardX, scikit-learn, pandas, dp-accounting, ...) are imported only on first use, by
features the check does not use (prepared datasets, TensorBoard logs, DP accounting, analysis).
`tests/test_benchmark_harness.py` runs the check with every other installed package hidden.

Each is downloaded `--no-deps` at its constraints.txt version into `--dest` (git-ignored),
replacing whatever else is there. Only pure-Python wheels (`*-none-any.whl`) are accepted: the
GPU machine's Python version is not known in advance (the project supports 3.10 and later),
and a pure wheel installs on any of them, so one file per package suffices. Both packages
publish one. Then the folder's size is checked against what a GPU machine takes with the
working tree (`LIMIT_MIB` in all, the tracked files included). On the machine:

  python -m pip install --no-deps --no-index .accelerator_wheels/*.whl
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSTRAINTS = os.path.join(ROOT, 'constraints.txt')
DEST = os.path.join(ROOT, '.accelerator_wheels')
# What the GPU machine comes with (their own requirements come along).
BARE = ('jax', 'jaxlib', 'flax', 'optax', 'chex', 'orbax-checkpoint', 'matplotlib')
# What the check imports beyond them: fedsim_jax.config (ml_collections), the runtime's
# idle-client set (sortedcontainers).
WHEELS = ('ml_collections', 'sortedcontainers')
LIMIT_MIB = 64.0


def canonical(name: str) -> str:
  """A distribution name as package indexes compare them (PEP 503)."""
  return name.lower().replace('_', '-').replace('.', '-')


def pinned_versions(path: str = CONSTRAINTS) -> dict[str, str]:
  """constraints.txt's `name==version` lines, by canonical name."""
  versions = {}
  with open(path, encoding='utf-8') as f:
    for line in f:
      name, sep, version = line.split('#')[0].strip().partition('==')
      if sep:
        versions[canonical(name)] = version
  return versions


def requirements(names: tuple[str, ...] = WHEELS) -> list[str]:
  """`name==version` of each wheel, pinned as in constraints.txt."""
  versions = pinned_versions()
  missing = [n for n in names if canonical(n) not in versions]
  if missing:
    raise SystemExit(f'error: {", ".join(missing)} not pinned in {CONSTRAINTS}')
  return [f'{n}=={versions[canonical(n)]}' for n in names]


def tracked_bytes() -> int:
  """Bytes of the working tree's tracked files (what travels besides the wheels)."""
  listing = subprocess.run(
    ['git', 'ls-files', '-z'], cwd=ROOT, capture_output=True, check=True
  ).stdout.decode()
  paths = (os.path.join(ROOT, p) for p in listing.split('\0') if p)
  return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def download(dest: str) -> list[str]:
  """Downloads the pinned wheels into `dest` (emptied of other wheels first)."""
  os.makedirs(dest, exist_ok=True)
  for stale in glob.glob(os.path.join(dest, '*.whl')):
    os.remove(stale)
  command = [sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps']
  command += ['--only-binary=:all:', '-d', dest, *requirements()]
  subprocess.run(command, check=True)
  wheels = sorted(glob.glob(os.path.join(dest, '*.whl')))
  platform_specific = [os.path.basename(w) for w in wheels if not w.endswith('-none-any.whl')]
  if platform_specific:
    raise SystemExit(f'error: not pure-Python wheels: {", ".join(platform_specific)}')
  return wheels


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--dest', default=DEST, help='folder of the wheels (git-ignored)')
  dest = parser.parse_args().dest
  wheels = download(dest)
  mib = 1 << 20
  wheel_bytes = sum(os.path.getsize(w) for w in wheels)
  tree_bytes = tracked_bytes()
  for w in wheels:
    print(f'{os.path.getsize(w) / 1024:8.1f} KiB  {os.path.basename(w)}')
  total = (wheel_bytes + tree_bytes) / mib
  print(
    f'wheels {wheel_bytes / mib:.2f} MiB + tracked files {tree_bytes / mib:.2f} MiB = '
    f'{total:.2f} MiB (limit {LIMIT_MIB:.0f} MiB)'
  )
  if total > LIMIT_MIB:
    raise SystemExit(f'error: {total:.2f} MiB exceeds the {LIMIT_MIB:.0f} MiB a GPU machine takes')


if __name__ == '__main__':
  main()
