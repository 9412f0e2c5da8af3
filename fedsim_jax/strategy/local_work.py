"""How much local training a task asks for."""

from __future__ import annotations

import dataclasses

from fedsim_jax.data.federated import steps_for_epochs
from fedsim_jax.runtime.latency import TaskLatency


@dataclasses.dataclass(frozen=True)
class LocalWork:
  """Local steps per task: fixed `steps`, `epochs` over the client's data, or as many steps as
  fit in `time_limit` seconds of on-device compute.

  With epochs, client i runs `steps_for_epochs(epochs, n_i, batch_size, sampling)` steps: E
  passes over its data, each at least one batch (McMahan et al.'s E). Under the default
  'shuffle' sampling that is ceil(E n_i / B) full batches when n_i >= B and ceil(E) steps of all
  n_i examples when n_i < B; under 'epochs' sampling, ceil(E ceil(n_i / B)) batches, each
  epoch's last one partial. With a time limit (the straggler paper's time-limited FedAvg, Section 2.1) the steps are those that
  fit, capped by `steps`/`epochs` when given; communication never counts against the limit, and
  the overhead C does when `limit_includes_overhead` (the paper is unclear; documented choice).
  """

  steps: int | None = None
  epochs: float | None = None
  batch_size: int = 32
  sampling: str = 'shuffle'
  time_limit: float | None = None
  limit_includes_overhead: bool = True

  def __post_init__(self):
    if self.steps is not None and self.epochs is not None:
      raise ValueError('set only one of client.local_steps and client.local_epochs')
    if self.steps is None and self.epochs is None and self.time_limit is None:
      raise ValueError('set client.local_steps, client.local_epochs or algorithm.kwargs.time_limit')
    if self.steps is not None and self.steps < 1:
      raise ValueError(f'client.local_steps={self.steps}; must be >= 1')
    if self.epochs is not None and self.epochs <= 0:
      raise ValueError(f'client.local_epochs={self.epochs}; must be > 0')
    if self.time_limit is not None and self.time_limit <= 0:
      raise ValueError(f'algorithm.kwargs.time_limit={self.time_limit}; must be > 0')

  def steps_for_epochs(self, epochs: float, num_examples: int) -> int:
    """Steps that make `epochs` passes over a client's `num_examples` examples."""
    return steps_for_epochs(epochs, num_examples, self.batch_size, self.sampling)

  def num_steps(self, num_examples: int, latency: TaskLatency | None = None) -> int:
    """Steps of one task for a client with `num_examples` examples and drawn `latency`."""
    if self.steps is not None:
      cap = self.steps
    elif self.epochs is not None:
      cap = self.steps_for_epochs(self.epochs, num_examples)
    else:
      cap = None
    if self.time_limit is None:
      assert cap is not None  # __post_init__: steps, epochs or a time limit
      return cap
    if latency is None:
      raise ValueError('a time-limited task needs its drawn latency')
    fit = latency.steps_within(self.time_limit, self.limit_includes_overhead)
    return fit if cap is None else min(fit, cap)
