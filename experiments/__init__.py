"""Binaries outside the library: `run.py` (one experiment: `fedsim-run` from a checkout, a wrapper
of `fedsim_jax.run`) and one reproduction kit per paper (settings, the paper's published
numbers, table writers and a `reproduce.py` binary), sharing the resumable sweep runner in
`sweep.py`. A kit's `--export` writes a sweep's run records to a small result file
(`results_data.py`, committed under docs/results/data/), and `results_docs.py` writes and checks
the tables of docs/results/ from those files."""
