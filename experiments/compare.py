"""Tabulates run directories: `python experiments/compare.py DIR [DIR...] --baseline LABEL` (the
`fedsim-compare` command; see docs/analysis.md)."""

from __future__ import annotations

import sys

from fedsim_jax.analysis.compare import main

if __name__ == '__main__':
  sys.exit(main())
