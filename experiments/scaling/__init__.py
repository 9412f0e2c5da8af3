"""Scaling curves: the fitted growth and the tables of docs/results/scaling.md."""
