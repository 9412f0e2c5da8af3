"""Analysis layer: reads finished (or stopped) run directories, plots them and compares them.

`run_files` loads a workdir or a sweep of seeds, `plots` draws figures from loaded runs,
`compare` tabulates groups of runs; `plot` and `compare` are the `fedsim-plot` and
`fedsim-compare` command lines. Nothing here runs a simulation.
"""
