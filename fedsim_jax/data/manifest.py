"""What a prepared dataset directory must hold, checked before it is read.

`prepare` records every file of a dataset version directory (size and sha256) in
`fedsim_manifest.json`; the loader refuses a directory whose dataset name is not the one asked
for (MNIST's files under `fashion_mnist/`) or whose files differ from the record (a split
replaced by another dataset's), naming the file, instead of training on the wrong data.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fedsim_jax.data.errors import CorruptDatasetError

MANIFEST = 'fedsim_manifest.json'
_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def _data_files(version_dir: Path) -> list[Path]:
  return sorted(p for p in version_dir.rglob('*') if p.is_file() and p.name != MANIFEST)


def write_manifest(version_dir: str | os.PathLike[str]) -> Path:
  """Records the name (from `dataset_info.json`) and every file of a prepared dataset."""
  version_dir = Path(version_dir)
  manifest = {
    'name': recorded_name(version_dir),
    'files': {
      str(p.relative_to(version_dir)): {'size': p.stat().st_size, 'sha256': _sha256(p)}
      for p in _data_files(version_dir)
    },
  }
  path = version_dir / MANIFEST
  temporary = path.with_suffix('.tmp')
  temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True) + '\n', encoding='utf-8')
  os.replace(temporary, path)
  return path


def recorded_name(version_dir: Path) -> str | None:
  """The dataset name `dataset_info.json` records (None if it records none)."""
  path = version_dir / 'dataset_info.json'
  try:
    with open(path, encoding='utf-8') as f:
      info: dict[str, Any] = json.load(f)
  except (OSError, ValueError) as error:
    raise CorruptDatasetError(f'{path} cannot be read ({type(error).__name__})') from None
  return info.get('name') if isinstance(info, dict) else None


def verify(version_dir: str | os.PathLike[str], expected_name: str | None, how_to_fix: str) -> None:
  """Raises CorruptDatasetError (one line, ending with `how_to_fix`) if the directory holds
  another dataset than `expected_name` (None: any) or its files differ from its manifest. A
  directory prepared before manifests existed is checked by name only."""
  version_dir = Path(version_dir)
  name = recorded_name(version_dir)
  if expected_name is not None and name != expected_name:
    raise CorruptDatasetError(
      f'{version_dir} holds dataset {name!r}, not {expected_name!r}; {how_to_fix}'
    )
  path = version_dir / MANIFEST
  if not path.is_file():
    return
  with open(path, encoding='utf-8') as f:
    recorded = json.load(f)['files']
  present = {str(p.relative_to(version_dir)): p for p in _data_files(version_dir)}
  for relative, expected in sorted(recorded.items()):
    file = present.get(relative)
    if file is None:
      raise CorruptDatasetError(f'{version_dir / relative} is missing; {how_to_fix}')
    if file.stat().st_size != expected['size'] or _sha256(file) != expected['sha256']:
      raise CorruptDatasetError(
        f'{file} is not the file prepared for {expected_name or name!r} (its size or sha256 '
        f'differs); {how_to_fix}'
      )
