"""Plots run directories: `python experiments/plot.py DIR [DIR...] --out OUTDIR` (the
`fedsim-plot` command; see docs/analysis.md)."""

from __future__ import annotations

import sys

from fedsim_jax.analysis.plot import main

if __name__ == '__main__':
  sys.exit(main())
