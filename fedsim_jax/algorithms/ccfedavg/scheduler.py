"""CC-FedAvg (Zhang et al., "CC-FedAvg: Computationally Customized Federated Averaging"),
Algorithms 1 and 2, with the skipping strategies it is compared against.

Each round the server samples S_t; a selected client trains (with probability p_i, decided by a
`TrainingSchedule`) or skips, and every selected client contributes a delta:

- 'last_delta' (Strategy 3, CC-FedAvg): a skipping client resends its last trained delta,
  Delta_t^i = Delta_{t-1}^i (Algorithm 1, line 15);
- 'last_model' (Strategy 2): it resends its last trained local model, Delta_t^i = x_{t-1,K}^i - x_t;
- 'ignore' (Strategy 1): it is left out; when nobody trains the model stays as it is;
- 'switch' (CC-FedAvg(c), Eq. 4): 'last_delta' before round `switch_round` (tau), then
  'last_model'.

The server update is x_{t+1} = x_t + (1/|S_t|) sum_i Delta_t^i, an unweighted mean with no
server learning rate (line 20-21). A client that must skip before it ever trained contributes a
zero delta (the paper's proof sets the "virtual" history to 0); with the schedules'
`first_selection_trains` it trains instead, as the public code does.

`storage='client'` keeps each client's history on the host, as Algorithm 1 (clients store and
send their estimate); `storage='server'` keeps it in the jitted server state and skipping clients
send one bit, as Algorithm 2 (use it with `ccfedavg_server_aggregator`). Both give the same
models (tests/strategy/test_ccfedavg.py).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.models import Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.tree import row, stack


class Estimator(StrEnum):
  """What a skipping client contributes (the module docstring)."""

  LAST_DELTA = 'last_delta'
  LAST_MODEL = 'last_model'
  IGNORE = 'ignore'
  SWITCH = 'switch'


class Storage(StrEnum):
  """Where the histories live (`algorithm.kwargs.storage`)."""

  CLIENT = 'client'
  SERVER = 'server'


ESTIMATORS = tuple(estimator.value for estimator in Estimator)
STORAGES = tuple(storage.value for storage in Storage)


@flax.struct.dataclass
class HistoryState:
  """Server state of Algorithm 2: the global model and each client's last trained delta."""

  params: Params
  last_delta: Params  # leaves [num_clients, ...]


def ccfedavg_server_aggregator(num_clients: int) -> Aggregator:
  """Algorithm 2: `estimated` rows take the server's stored delta of their client;
  trained rows replace it. x <- x + mean over the selected clients (weights mark real rows)."""

  def init(params: Params) -> HistoryState:
    table = jax.tree_util.tree_map(lambda p: jnp.zeros((num_clients, *p.shape), p.dtype), params)
    return HistoryState(params=params, last_delta=table)

  def apply(state: HistoryState, updates: UpdateBatch) -> HistoryState:
    estimate = updates.estimated
    assert estimate is not None  # BudgetedScheduler marks the estimated rows
    trained = (updates.weights > 0) & ~estimate
    ids = updates.client_id

    def row_mask(mask, leaf):
      return mask.reshape(-1, *([1] * (leaf.ndim - 1)))

    deltas = jax.tree_util.tree_map(
      lambda d, table: jnp.where(row_mask(estimate, d), table[ids], d),
      updates.deltas,
      state.last_delta,
    )
    # Trained rows overwrite their client's history (padding and estimate rows write it back).
    last_delta = jax.tree_util.tree_map(
      lambda table, d: table.at[ids].set(jnp.where(row_mask(trained, d), d, table[ids])),
      state.last_delta,
      deltas,
    )
    count = jnp.maximum((updates.weights > 0).sum(), 1)
    mean = jax.tree_util.tree_map(
      lambda d: jnp.tensordot((updates.weights > 0).astype(d.dtype), d, axes=1) / count, deltas
    )
    params = jax.tree_util.tree_map(jnp.add, state.params, mean)
    return HistoryState(params=params, last_delta=last_delta)

  return Aggregator(init=init, apply=apply)


class BudgetedScheduler:
  """Synchronous rounds in which selected clients train or skip by a training schedule.

  Args:
    cohort_size: |S_t|, sampled without replacement each round.
    local_work: local steps of a training client.
    schedule: decides train/skip (`strategy.budgets`), with `trains(client, round, trained)`.
    estimator: one of ESTIMATORS (see the module docstring).
    switch_round: tau of CC-FedAvg(c).
    storage: 'client' (Algorithm 1) or 'server' (Algorithm 2).
    steps_per_client: optional per-client local steps (FedNova's p_i K), overriding local_work.
  """

  def __init__(
    self,
    cohort_size: int,
    local_work: LocalWork,
    schedule: Any,
    estimator: str = 'last_delta',
    switch_round: int = 100,
    storage: str = 'client',
    steps_per_client: np.ndarray | None = None,
  ):
    if estimator not in ESTIMATORS:
      raise ValueError(f'estimator={estimator!r}; allowed: {ESTIMATORS}')
    if storage not in STORAGES:
      raise ValueError(f'algorithm.kwargs.storage={storage!r}; allowed: {STORAGES}')
    if storage == Storage.SERVER and estimator != Estimator.LAST_DELTA:
      raise ValueError(
        "algorithm.kwargs.storage='server' implements Algorithm 2, which stores "
        "deltas: it needs estimator='last_delta' (algorithm 'ccfedavg')"
      )
    if cohort_size < 1:
      raise ValueError(f'algorithm.kwargs.cohort_size={cohort_size}; must be >= 1')
    self.cohort_size = cohort_size
    self.local_work = local_work
    self.schedule = schedule
    self.estimator = Estimator(estimator)
    self.switch_round = switch_round
    self.storage = Storage(storage)
    self.steps_per_client = steps_per_client
    self.round_index = -1
    self.trained_updates = 0  # per run: updates computed by training
    self.estimated_updates = 0  # per run: updates filled in by estimation
    # Each client's last trained update and model (start params + update), kept only for the
    # estimators that read them; zeros before a client first trains.
    self.last_delta: client_table.ClientTable | None = None
    self.last_model: client_table.ClientTable | None = None
    self._has_trained: set[int] = set()
    self._training: list[TaskHandle] = []
    self._skipping: list[int] = []
    self._outstanding = 0

  def start(self, sim: SchedulerContext) -> None:
    if self.cohort_size > sim.num_clients:
      raise ValueError(
        f'algorithm.kwargs.cohort_size={self.cohort_size} exceeds the federation '
        f'({sim.num_clients} clients)'
      )
    if self.storage == Storage.CLIENT and self.estimator in (
      Estimator.LAST_DELTA,
      Estimator.SWITCH,
    ):
      self.last_delta = client_table.create(sim.params, sim.num_clients)
    if self.estimator in (Estimator.LAST_MODEL, Estimator.SWITCH):
      self.last_model = client_table.create(sim.params, sim.num_clients)
    self._start_round(sim)

  def report(self) -> dict[str, int]:
    """Compute accounting for the run summary: updates trained vs estimated."""
    return {'trained_updates': self.trained_updates, 'estimated_updates': self.estimated_updates}

  def _start_round(self, sim: SchedulerContext) -> None:
    self.round_index += 1
    cohort = np.sort(sim.rng.choice(sim.num_clients, self.cohort_size, replace=False))
    self._training, self._skipping = [], []
    for client in cohort:
      client = int(client)
      if self.schedule.trains(client, self.round_index, client in self._has_trained):
        steps = (
          int(self.steps_per_client[client])
          if self.steps_per_client is not None
          else self.local_work.num_steps(int(sim.client_sizes[client]))
        )
        self._training.append(sim.dispatch(client, steps))
      else:
        self._skipping.append(client)
        sim.record_skipped(client, estimated=self._estimate_kind() != Estimator.IGNORE)
    self._outstanding = len(self._training)
    if not self._training:  # nobody trains: the round closes at once
      sim.set_timer(sim.now, ('close', self.round_index))

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    self._outstanding -= 1
    if self._outstanding == 0:
      self._close_round(sim)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    kind, round_index = payload
    if kind == 'close' and round_index == self.round_index:
      self._close_round(sim)

  def _estimate_kind(self) -> str:
    if self.estimator == Estimator.SWITCH:
      return Estimator.LAST_DELTA if self.round_index < self.switch_round else Estimator.LAST_MODEL
    return self.estimator

  def _close_round(self, sim: SchedulerContext) -> None:
    trained = sorted(self._training, key=lambda h: h.task_id)
    kind = self._estimate_kind()
    skipping = [] if kind == Estimator.IGNORE else self._skipping
    if trained:
      batch = sim.updates(trained, [1.0] * len(trained))
      rows = [row(batch.deltas, i) for i in range(len(trained))]
      models = (
        [sim.task_params(handle) for handle in trained] if self.last_model is not None else []
      )
      for index, (handle, delta) in enumerate(zip(trained, rows)):
        if self.last_delta is not None:
          self.last_delta = client_table.write(self.last_delta, handle.client_id, delta)
        if self.last_model is not None:
          self.last_model = client_table.write(self.last_model, handle.client_id, models[index])
        self._has_trained.add(handle.client_id)
    else:
      rows = []
    self.trained_updates += len(trained)
    self.estimated_updates += len(skipping)
    if not trained and not skipping:
      # Strategy 1 with nobody training: the round passes (it counts towards T, as in the
      # paper's loop over t) and the model stays.
      sim.advance_version()
      self._start_round(sim)
      return
    zeros = jax.tree_util.tree_map(jnp.zeros_like, sim.params)
    estimates = []
    for client in skipping:
      if self.storage == Storage.SERVER:
        estimates.append(zeros)  # the server fills in its stored delta (Algorithm 2)
      elif kind == Estimator.LAST_DELTA:
        assert self.last_delta is not None
        estimates.append(client_table.read(self.last_delta, client))
      else:
        assert self.last_model is not None
        if self.last_model.written[client]:
          model = client_table.read(self.last_model, client)
          estimates.append(jax.tree_util.tree_map(jnp.subtract, model, sim.params))
        else:
          estimates.append(zeros)
    deltas = stack(rows + estimates)
    count = len(rows) + len(estimates)
    # Weights 1/|S_t|: the mean over the selected clients; FedNova's reducer (`fednova_mean`)
    # reads them as the p_i of its sum.
    batch = UpdateBatch(
      deltas=deltas,
      weights=jnp.asarray(np.full(count, 1.0 / count, np.float32)),
      staleness=jnp.asarray(np.zeros(count, np.int32)),
      num_steps=jnp.asarray(
        np.array([h.num_steps for h in trained] + [0] * len(estimates), np.int32)
      ),
      group=jnp.asarray(np.zeros(count, np.int32)),
      estimated=jnp.asarray(np.array([False] * len(rows) + [True] * len(estimates))),
      client_id=jnp.asarray(np.array([h.client_id for h in trained] + skipping, np.int32)),
    )
    sim.apply_update_batch(batch, trained)
    self._start_round(sim)
