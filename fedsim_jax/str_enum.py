"""`StrEnum`: Python 3.11's `enum.StrEnum`, and the same behaviour on Python 3.10.

A setting's allowed names are a `StrEnum`, parsed once where the setting enters the code; a
member equals, hashes and prints as its string, so callers passing strings keep working.
"""

from __future__ import annotations

import enum
import sys
from typing import TypeVar

if sys.version_info >= (3, 11):
  from enum import StrEnum
else:  # pragma: no cover - exercised on Python 3.10 only

  class StrEnum(str, enum.Enum):
    """A string-valued enum whose members print as their value."""

    def __str__(self) -> str:
      return str(self.value)

    def __format__(self, spec: str) -> str:
      return str(self.value).__format__(spec)


E = TypeVar('E', bound=StrEnum)


def parse(kind: type[E], value: object, setting: str) -> E:
  """`value` as a member of `kind`; `ValueError` naming `setting` and the allowed values."""
  try:
    return kind(value)
  except ValueError:
    allowed = tuple(member.value for member in kind)
    raise ValueError(f'{setting}={value!r}; allowed: {allowed}') from None


__all__ = ['StrEnum', 'parse']
