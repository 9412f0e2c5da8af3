"""Binaries outside the library: `run.py` (one experiment: `fedsim-run` from a checkout, a wrapper
of `fedsim_jax.run`) and one reproduction kit per paper (settings, the paper's published
numbers, table writers and a `reproduce.py` binary), sharing the resumable sweep runner in
`sweep.py`."""
