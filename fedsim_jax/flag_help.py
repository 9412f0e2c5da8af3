"""`--help` of the console scripts: the tool's own flags up front."""

from __future__ import annotations

import sys

from absl import flags


def show_flags_in_help(module_name: str) -> None:
  """Lists the flags `module_name` defines in `--help`. absl's `--help` shows the key flags of
  the program it runs (`sys.argv[0]`); a console script's wrapper defines none, so without
  this the tools' help listed no flag at all."""
  program = sys.argv[0]
  for flag in flags.FLAGS.get_key_flags_for_module(module_name):
    flags.FLAGS.register_key_flag_for_module(program, flag)
