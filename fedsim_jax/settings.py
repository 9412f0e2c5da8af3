"""Typed, self-validating settings: `ConfigError` and the `Settings` dataclass base.

An algorithm's settings are a frozen dataclass whose fields declare their allowed values with
`setting(default, check)`. Building one (`Settings.from_kwargs`) is the only place its fields
are validated: every type, NaN/inf and range error, and every misspelt or foreign field, raises
`ConfigError` with one line naming the setting and its allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar


class ConfigError(ValueError):
  """An invalid experiment setting; its message is one line naming the setting."""


Check = Callable[[str, Any], None]  # (full setting name, value) -> None, or raises ConfigError


def allowed_values(check: Check) -> str:
  """What `check` accepts, in words (as its error messages say it)."""
  return getattr(check, 'allowed', '')


def _describes(allowed: str) -> Callable[[Check], Check]:
  def attach(check: Check) -> Check:
    check.allowed = allowed  # type: ignore[attr-defined]
    return check

  return attach


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(
  *,
  integer: bool = False,
  minimum: float | None = None,
  maximum: float | None = None,
  above: float | None = None,
  below: float | None = None,
  optional: bool = False,
) -> Check:
  """A finite number (or integer) within the given bounds (`above`/`below` exclusive)."""
  kind = 'an integer' if integer else 'a number'
  bounds = [
    f'>= {minimum}' if minimum is not None else '',
    f'> {above}' if above is not None else '',
    f'<= {maximum}' if maximum is not None else '',
    f'< {below}' if below is not None else '',
  ]
  allowed = ' '.join([kind, ' and '.join(b for b in bounds if b)]).strip()
  if optional:
    allowed += ' or None'

  @_describes(allowed)
  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    ok = (
      _is_number(value)
      and (not integer or isinstance(value, int))
      and (minimum is None or value >= minimum)
      and (above is None or value > above)
      and (maximum is None or value <= maximum)
      and (below is None or value < below)
    )
    if not ok:
      raise ConfigError(f'{name}={value!r} is invalid; allowed values: {allowed}')

  return check


def positive(*, integer: bool = False, allow_zero: bool = False, optional: bool = False) -> Check:
  """A number (or integer) > 0, or >= 0 with `allow_zero`."""
  if allow_zero:
    return number(integer=integer, minimum=0, optional=optional)
  return number(integer=integer, above=0, optional=optional)


def decay() -> Check:
  """0 <= x < 1 (decay rates, momenta)."""
  return number(minimum=0, below=1)


def one_of(allowed: Iterable[Any], *, optional: bool = False) -> Check:
  allowed = tuple(allowed)
  # A `StrEnum`'s members are listed by their values ('batch'), not their reprs.
  shown = sorted(str(v) if isinstance(v, str) else v for v in allowed)

  @_describes(f'{shown}' + (' or None' if optional else ''))
  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    if value not in allowed:
      raise ConfigError(f'{name}={value!r} is not allowed; allowed values: {shown}')

  return check


@_describes('True, False')
def boolean(name: str, value: Any) -> None:
  if not isinstance(value, bool):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: True, False')


def text(*, optional: bool = False) -> Check:
  @_describes('a non-empty string' + (' or None' if optional else ''))
  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    if not isinstance(value, str) or not value:
      raise ConfigError(f'{name}={value!r} is invalid; allowed values: a non-empty string')

  return check


def tuple_of(
  item: Check, allowed: str, *, length: int | None = None, optional: bool = False
) -> Check:
  """A tuple (or list) of `length` items (any number if None), each passing `item`."""

  @_describes(allowed + (' or None' if optional else ''))
  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    if not isinstance(value, (tuple, list)) or (length is not None and len(value) != length):
      raise ConfigError(f'{name}={value!r} is invalid; allowed values: {allowed}')
    for element in value:
      item(name, element)

  return check


def setting(default: Any, check: Check, doc: str = '') -> Any:
  """A settings field: its default, its check, and a one-line description."""
  return dataclasses.field(default=default, metadata={'check': check, 'doc': doc})


def closest(name: str, candidates: Iterable[str]) -> str:
  """' (did you mean 'x'?)' for the closest candidate, or ''."""
  match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
  return f' (did you mean {match[0]!r}?)' if match else ''


SettingsT = TypeVar('SettingsT', bound='Settings')


@dataclasses.dataclass(frozen=True)
class Settings:
  """Base of settings dataclasses. Subclasses declare fields with `setting(...)` and may add
  cross-field rules in `check`; `from_kwargs` validates both."""

  def check(self, prefix: str) -> None:
    """Cross-field rules; raise `ConfigError` naming `prefix + field`."""
    del prefix

  @classmethod
  def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))

  @classmethod
  def from_kwargs(cls: type[SettingsT], kwargs: Mapping[str, Any], prefix: str = '') -> SettingsT:
    """Builds and validates the settings from keyword values (missing ones take the defaults).

    Raises:
      ConfigError: a field that is not a setting of `cls` (naming the closest one), or an
        invalid value (naming the setting and its allowed values).
    """
    names = cls.field_names()
    for key in kwargs:
      if key not in names:
        raise ConfigError(
          f'{prefix}{key} is not a setting of {cls.__name__}{closest(key, names)}; '
          f'allowed: {sorted(names)}'
        )
    values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()}
    settings = cls(**values)
    settings.validate(prefix)
    return settings

  def validate(self, prefix: str = '') -> None:
    for field in dataclasses.fields(self):
      check = field.metadata.get('check')
      if check is not None:
        check(prefix + field.name, getattr(self, field.name))
    self.check(prefix)

  def replace(self: SettingsT, **changes: Any) -> SettingsT:
    return dataclasses.replace(self, **changes)

  def as_dict(self) -> dict[str, Any]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

  def describe(self, prefix: str = '') -> str:
    """Each field with its value, description and allowed values, two lines per field (the
    text of `--describe`), from the same `setting(...)` declarations that validate them."""
    lines = []
    for field in dataclasses.fields(self):
      check = field.metadata.get('check')
      doc = field.metadata.get('doc') or ''
      lines.append(f'{prefix}{field.name} = {getattr(self, field.name)!r}')
      lines.append(f'    {doc}; allowed: {allowed_values(check) if check else "any"}')
    return '\n'.join(lines)
