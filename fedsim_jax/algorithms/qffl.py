"""q-FFL's q-FedAvg (Li, Sanjabi, Beirami, Smith 2020, "Fair Resource Allocation in Federated
Learning", Algorithm 2): synchronous rounds whose server step weights each client by its loss
raised to the power q, so that clients the model serves badly pull harder (q = 0 is FedAvg).

In round t each sampled client k trains from w^t with local SGD at step size eta to w_k, and

    Delta w_k = L (w^t - w_k)
    Delta_k   = F_k(w^t)^q Delta w_k
    h_k       = q F_k(w^t)^(q-1) ||Delta w_k||^2 + L F_k(w^t)^q
    w^{t+1}   = w^t - sum_k Delta_k / sum_k h_k

with F_k(w^t) the client's loss on its training data at the round's model and L an estimate
of the local Lipschitz constant.

How it is computed here:
* F_k(w^t) is the client's mean loss over all its training examples at the round's model
  (`SchedulerContext.client_loss`, `strategy.client_loss`, as the authors' code computes it before local training), plus
  1e-10 (their code's guard against 0^q); L = 1 / eta with eta = `client.learning_rate` (the
  authors' choice) unless `lipschitz` is set.
* The server step is a weighted sum of the client deltas w_k - w^t: with delta_k = -Delta w_k /
  L, w^{t+1} = w^t + sum_k a_k delta_k, a_k = L F_k^q / sum_j h_j. The scheduler computes
  a_k when the round closes (`QffedavgScheduler`) and the aggregator sums (`weighted_sum`).
* The paper samples clients with probability p_k (their data share) and aggregates without
  weights; the rounds here sample clients uniformly (the synchronous scheduler's only rule), so
  the objective weighs clients equally rather than by data.

Limits (tests/algorithms/test_qffl_values.py): with q = 0, Delta_k = Delta w_k and h_k = L, so
w^{t+1} is the plain mean of the clients' models: FedAvg with `weighting='uniform'`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  synchronous_scheduler,
)
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.settings import one_of, positive, setting
from fedsim_jax.strategy.reducers import weighted_sum
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import AroundRounds, ClosingRound
from fedsim_jax.tree import row

LOSS_GUARD = 1e-10  # added to F_k before the power, as the authors' code does


def qffl_weights(
  losses: Sequence[float], squared_norms: Sequence[float], q: float, lipschitz: float
) -> np.ndarray:
  """a_k = L F_k^q / sum_j h_j, h_j = q F_j^(q-1) L^2 ||delta_j||^2 + L F_j^q: the weights of
  the client deltas delta_k = w_k - w^t in w^{t+1} = w^t + sum_k a_k delta_k."""
  guarded = np.asarray(losses, np.float64) + LOSS_GUARD
  squared = np.asarray(squared_norms, np.float64)
  powered = np.power(guarded, q)
  h = q * np.power(guarded, q - 1.0) * lipschitz**2 * squared + lipschitz * powered
  return lipschitz * powered / h.sum()


class QffedavgScheduler(AroundRounds):
  """Synchronous rounds that reweight each round's deltas by q-FFL's rule (module docstring).

  Args:
    settings: the algorithm's (`q` and the rounds' settings).
    lipschitz: L.
    context: the run.

  Attributes:
    last_losses: the F_k of the last round's aggregated clients (client -> loss).
  """

  def __init__(self, settings: QffedavgSettings, lipschitz: float, context: BuildContext):
    self.q = float(settings.q)
    self.lipschitz = float(lipschitz)
    self.last_losses: dict[int, float] = {}
    self.rounds = synchronous_scheduler(settings, context, round_closing=self._round_closing)

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> list[float]:
    batch = sim.updates(closing.aggregated, closing.weights)
    losses = [sim.client_loss(sim.params, h.client_id) for h in closing.aggregated]
    squared = [
      float(sum(np.vdot(leaf, leaf) for leaf in _leaves(row(batch.deltas, index))))
      for index in range(len(closing.aggregated))
    ]
    self.last_losses = {h.client_id: loss for h, loss in zip(closing.aggregated, losses)}
    return qffl_weights(losses, squared, self.q, self.lipschitz).tolist()


def _leaves(tree: Any) -> list[np.ndarray]:
  import jax

  return [np.asarray(leaf, np.float64) for leaf in jax.tree_util.tree_leaves(tree)]


@dataclasses.dataclass(frozen=True)
class QffedavgSettings(DeadlineSettings, LocalWorkSettings, ServerEmaSettings):
  weighting: str = setting('uniform', one_of(('uniform',)), "q-FFL's rule sets the weights")
  q: float = setting(1.0, positive(allow_zero=True), 'fairness exponent q (0: FedAvg)')
  lipschitz: float | None = setting(
    None,
    positive(optional=True),
    'L, the local Lipschitz estimate (None: 1 / client.learning_rate)',
  )


@register('qffedavg', QffedavgSettings)
def qffedavg_algorithm(settings: QffedavgSettings, context: BuildContext) -> Algorithm:
  lipschitz = settings.lipschitz or 1.0 / context.run.client_learning_rate
  scheduler = QffedavgScheduler(settings, lipschitz, context)
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(optax.sgd(1.0), weighted_sum())),
  )
