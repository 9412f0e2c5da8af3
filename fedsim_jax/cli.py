"""Shared pieces of the absl binaries: one-line errors with exit code 2, comma-list flags, quiet
logging."""

from __future__ import annotations

import logging as pylogging
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from absl import flags, logging


class FlagError(ValueError):
  """An invalid flag value; its message is one line."""


def fail(message: str) -> NoReturn:
  """Prints `error: <first line of message>` on stderr and exits with code 2."""
  line = message.splitlines()[0] if message else 'error'
  print(f'error: {line}', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parser, with errors as one line and exit code 2 instead of usage text (pass
  as `app.run(main, flags_parser=parse_flags)`)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    message = str(error) or type(error).__name__
    section = re.search(r'flag --config\.([\w.]+)=.*as a ConfigDict', message)
    if section:  # a section given a value, e.g. --config.algorithm=fedbuff
      name = section.group(1)
      example = 'name' if name == 'algorithm' else '<field>'
      message = (
        f'{name} is a section of settings; allowed: its fields, e.g. --config.{name}.{example}=...'
      )
    fail(message)


def quiet_logging(verbose_by_default: bool = False) -> None:
  """Hides JAX's 'no TPU' notices, and per-evaluation lines unless --verbosity is given."""
  pylogging.getLogger('jax._src.xla_bridge').setLevel(pylogging.WARNING)
  if verbose_by_default:
    logging.set_verbosity(logging.INFO)
  elif not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)


def parse_list(
  name: str, text: str, convert: Callable[[str], Any], check: Callable[[Any], bool], allowed: str
) -> list:
  """Parses the comma list `--name=text`: converted, checked, duplicates dropped, order kept.

  Raises:
    FlagError: an item does not convert or fails `check`; the message names the flag and
      `allowed`.
  """
  values = []
  for item in (item.strip() for item in text.split(',')):
    if not item:
      continue
    try:
      value = convert(item)
    except ValueError:
      value = None
    if value is None or not check(value):
      raise FlagError(f'--{name}={text!r}: {item!r} is invalid; allowed values: {allowed}')
    if value not in values:
      values.append(value)
  return values
