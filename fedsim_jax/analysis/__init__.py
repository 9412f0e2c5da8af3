"""Analysis layer: reads finished (or stopped) run directories, plots them and compares them.

`run_files` loads a workdir or a sweep of seeds, `plots` draws figures from loaded runs,
`compare` tabulates groups of runs, `frame.load_runs` gives runs as a pandas DataFrame; `plot`
and `compare` are the `fedsim-plot` and `fedsim-compare` command lines. Nothing here runs a
simulation.
"""

from fedsim_jax.analysis.frame import load_runs

__all__ = ['load_runs']
