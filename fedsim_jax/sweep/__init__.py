"""Sweeps: many runs of one config over settings and seeds, resumable and in parallel.

`spec` says what a sweep runs (its points), `runs` where each run stands, `paths` sets and
checks dotted settings, `jobs` groups runs into processes and runs them, `worker` is one such
process, `sweep.Sweep` ties them to a folder, and `command` is `fedsim-sweep`. The study kits
under experiments/ read run states and set settings with the same pieces.
"""
