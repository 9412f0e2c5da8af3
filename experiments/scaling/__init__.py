"""Scaling curves: the fitted growth and the tables of the scaling curves of docs/results/performance.md."""
