"""Metrics layer: evaluation, metrics.jsonl and summary writers."""

from fedsim_jax.metrics.evaluation import make_evaluator
from fedsim_jax.metrics.writers import MetricsWriter, read_metrics, summarize, write_json

__all__ = ['make_evaluator', 'MetricsWriter', 'read_metrics', 'summarize', 'write_json']
