"""Binaries outside the library: `run.py` (one experiment) and one reproduction kit per paper
(settings, the paper's published numbers, table writers and a `reproduce.py` binary), sharing
the resumable sweep runner in `sweep.py`."""
