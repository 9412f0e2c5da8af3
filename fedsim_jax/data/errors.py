"""Exceptions raised by the offline data layer.

Both exceptions carry a single-line message meant to be shown to a user as is:
it names the dataset, the location involved and what to do about it.
"""

from __future__ import annotations

import os


def prepare_command(name: str, data_dir: str | os.PathLike[str]) -> str:
  """Returns the shell command that prepares dataset `name` under `data_dir`."""
  return f'python -m fedsim_jax.data.prepare --dataset={name} --data_dir={os.fspath(data_dir)}'


class DatasetNotFoundError(FileNotFoundError):
  """A prepared dataset, or the local source it is built from, does not exist."""

  def __init__(self, message: str) -> None:
    super().__init__(' '.join(message.split()))

  @classmethod
  def not_prepared(
    cls, name: str, data_dir: str | os.PathLike[str], how: str | None = None
  ) -> DatasetNotFoundError:
    """The dataset has not been prepared under `data_dir`.

    Args:
      name: the dataset.
      data_dir: the data dir searched.
      how: how to prepare it, where `prepare_command` does not apply; "DIR" in it is
        replaced by `data_dir`.
    """
    if how is None:
      how = f'prepare it with: {prepare_command(name, data_dir)}'
    else:
      how = how.replace('DIR', os.fspath(data_dir))
    return cls(f'Dataset {name!r} is not prepared in data dir {os.fspath(data_dir)!r}; {how}')

  @classmethod
  def missing_source(
    cls, name: str, path: str | os.PathLike[str], provider: str
  ) -> DatasetNotFoundError:
    """The local source files of dataset `name` are missing at `path`."""
    return cls(f'Source of dataset {name!r} not found at {os.fspath(path)!r}; {provider}')


class CorruptDatasetError(ValueError):
  """A dataset directory or source file exists but cannot be read."""

  def __init__(self, message: str) -> None:
    super().__init__(' '.join(message.split()))
