"""Shared pieces of the absl binaries: one-line errors with exit code 2, comma-list flags, quiet
logging, config files named by module."""

from __future__ import annotations

import importlib.util
import logging as pylogging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from absl import flags, logging
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from fedsim_jax.config import (
  check_override_path,
  existing_sections,
  moved_section_of,
  set_by_path,
)
from fedsim_jax.settings import ConfigError, closest


class FlagError(ValueError):
  """An invalid flag value; its message is one line."""


def fail(message: str) -> NoReturn:
  """Prints `error: <first line of message>` on stderr and exits with code 2."""
  line = message.splitlines()[0] if message else 'error'
  print(f'error: {line}', file=sys.stderr)
  sys.exit(2)


# ml_collections' messages for an override of the wrong type, and what the setting allows.
_TYPE_ERRORS = (
  (r'invalid literal for int\(\) with base 10', 'an integer'),
  (r'could not convert string to float', 'a number'),
  (r'Non-boolean argument|as a boolean', 'true or false'),
)


def _without_none_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
  """Splits `--config.<path>=None` overrides off `argv`: ml_collections parses them with the
  field's type (int('None') fails), so they are applied after parsing."""
  kept, none_paths = [], []
  for arg in argv:
    match = re.fullmatch(r'--config\.([\w.]+)=None', arg)
    if match:
      none_paths.append(match.group(1))
    else:
      kept.append(arg)
  return kept, none_paths


def override_paths(argv: Sequence[str]) -> list[str]:
  """The setting paths of the `--config.<path>=...` overrides in `argv` (booleans may be given
  as `--config.<path>` or `--noconfig.<path>`)."""
  paths = []
  for arg in argv:
    match = re.match(r'--(?:no)?config\.([\w.]+)(=|$)', arg)
    if match:
      paths.append(match.group(1))
  return paths


_MODULE_NAME = re.compile(r'[A-Za-z_]\w*(\.[A-Za-z_]\w*)*')


def config_module_file(value: str) -> str | None:
  """The file of the config module that `--config=value` names, or None if it names none.

  `value` is a dotted module name with a `get_config()`, as in
  `--config=fedsim_jax.configs.fedavg_fashion_mnist`, optionally followed by `:<argument>` for
  `get_config` (as for files); the result keeps that suffix. A path (one with a separator or a
  `.py` suffix, or an existing file) is no module name; nor is a name that cannot be found.
  Finding a module imports its parent packages, not the module itself.
  """
  name, colon, argument = value.partition(':')
  if name.endswith('.py') or not _MODULE_NAME.fullmatch(name) or os.path.exists(name):
    return None
  try:
    spec = importlib.util.find_spec(name)
  except Exception:  # noqa: BLE001 - a parent package is missing, a module, or fails to import
    return None
  if spec is None or not spec.origin or not spec.has_location:
    return None
  return spec.origin + colon + argument


def _with_config_files(argv: list[str]) -> list[str]:
  """`argv` with a `--config` module name replaced by its file (absl's config flag takes a
  path); an unknown name stays as it is, for the one-line 'cannot be loaded' error."""
  resolved = list(argv)
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      file = config_module_file(arg.split('=', 1)[1])
      if file is not None:
        resolved[i] = f'--config={file}'
    elif arg == '--config' and i + 1 < len(argv):
      file = config_module_file(argv[i + 1])
      if file is not None:
        resolved[i + 1] = file
  return resolved


def _root_cause(error: BaseException) -> BaseException:
  while error.__cause__ is not None:
    error = error.__cause__
  return error


def _config_file_error(argv: list[str], error: BaseException) -> str:
  path = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), '?')
  if isinstance(error, (FileNotFoundError, IsADirectoryError)) or 'No such file' in str(error):
    reason = 'no such file' if path.partition(':')[0].endswith('.py') else 'no such file or module'
  elif isinstance(error, SyntaxError):
    reason = f'syntax error at line {error.lineno}: {error.msg}'
  elif isinstance(error, AttributeError) and 'get_config' in str(error):
    reason = 'the module defines no get_config()'
  elif isinstance(error, AttributeError) and moved_section_of(str(error).strip('\'"')):
    moved = moved_section_of(str(error).strip('\'"'))
    reason = f'it reads a section of an earlier layout: {moved}'
  else:
    reason = f'{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ""}'
  return f'--config={path} cannot be loaded ({reason}); allowed values: a config file (.py) or module name (fedsim_jax.configs.<name>) with get_config()'


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parser, with errors as one line and exit code 2 instead of usage text (pass
  as `app.run(main, flags_parser=parse_flags)`). `--config.<field>=None` sets a field to None
  whatever its type. Where `--config` is a config file flag, a dotted module name
  (`--config=fedsim_jax.configs.fedavg_fashion_mnist`) is read from the module's file."""
  argv, none_paths = _without_none_overrides(argv)
  if 'config' in flags.FLAGS and isinstance(flags.FLAGS['config'].parser, ConfigFileFlagParser):
    argv = _with_config_files(argv)
    for path in [*override_paths(argv), *none_paths]:
      try:
        check_override_path(path)
      except ConfigError as error:
        fail(str(error))
  try:
    remaining = flags.FLAGS(argv)
  except KeyError as error:  # ml_collections: a section of an override is missing
    quoted = re.search(r"'(\w+)'", str(error.args[0]) if error.args else '')
    missing = quoted.group(1) if quoted else '?'
    paths = override_paths(argv)
    path = next((p for p in paths if missing in p.split('.')), paths[0] if paths else '?')
    parent = path.split(f'.{missing}')[0] if f'.{missing}' in path else ''
    sections = existing_sections(parent)
    hint = closest(missing, [name.rsplit('.', 1)[-1] for name in sections])
    fail(
      f'--config.{path}: the config has no section {missing!r}{hint}; allowed: '
      f'{sections or "the sections --describe lists"}'
    )
  except flags.Error as error:
    message = str(error) or type(error).__name__
    section = re.search(r'flag --config\.([\w.]+)=.*as a ConfigDict', message)
    typed = re.search(r'flag --config\.([\w.]+)=(.*?): (.*)', message)
    if section:  # a section given a value, e.g. --config.algorithm=fedbuff
      name = section.group(1)
      example = 'name' if name == 'algorithm' else '<field>'
      message = (
        f'{name} is a section of settings; allowed: its fields, e.g. --config.{name}.{example}=...'
      )
    elif typed:
      allowed = next((a for pattern, a in _TYPE_ERRORS if re.search(pattern, typed.group(3))), None)
      if allowed is not None:
        message = f'{typed.group(1)}={typed.group(2)} is invalid; allowed values: {allowed}'
    fail(message)
  except (OSError, SyntaxError, AttributeError, ImportError) as error:  # the --config file
    fail(_config_file_error(argv, error))
  if 'config' in flags.FLAGS and flags.FLAGS['config'].present:
    try:  # ml_collections defers a file that failed to load until the config is first read
      config: Any = flags.FLAGS['config'].value
      config.keys()
    except Exception as error:  # noqa: BLE001 - reported as one line
      fail(_config_file_error(argv, _root_cause(error)))
  if none_paths:
    config = flags.FLAGS['config'].value
    for path in none_paths:
      try:
        set_by_path(config, path, None)
      except (KeyError, AttributeError):
        fail(f'{path} is not a setting; allowed: the fields of base_config()')
  return remaining


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
