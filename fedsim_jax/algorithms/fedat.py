"""FedAT (Chai et al. 2021): clients grouped into speed tiers (fastest-to-slowest ratio v per
tier), synchronous rounds inside a tier, asynchronous across tiers with FedAT's cross-tier
weights (reversed update counts).

FedAT (Chai et al. 2021, "FedAT: A High-Performance and Communication-Efficient Federated
Learning System with Asynchronous Tiers").

Clients are tiered by speed: sorted by expected time per step, a tier starts at the fastest
remaining client t_0 and takes every client with t <= v * t_0 (FedCompass's description of its
FedAT baseline: "clients with speed ratio within v are tiered together", v = 2). Inside a tier
training is synchronous: a round samples min(cohort_size, tier size) of its idle clients, which
start from the current global model, and ends when all report; the tier's model becomes their
example-weighted average. Across tiers it is asynchronous: after each tier round the global
model is the weighted average of the tier models with FedAT's cross-tier weights, which give a
tier that has updated less often a proportionally larger weight: ranking the tiers by update
count T_m (most first), the tier at rank r gets weight T_(M+1-r) / sum_m T_m, i.e. the counts
are assigned in reverse order. Tiers that have not updated yet are left out of the average
(their model is still the initial one; documented choice, the paper starts all tiers together).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  CohortSizeSettings,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.models import Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.settings import number, setting
from fedsim_jax.strategy.local_work import LocalWork


def speed_tiers(step_times: np.ndarray, ratio: float) -> list[np.ndarray]:
  """Groups clients into tiers whose slowest/fastest step-time ratio is at most `ratio`.

  Returns the tiers fastest first, each an ascending array of client ids.
  """
  if ratio < 1:
    raise ValueError(f'algorithm.kwargs.tier_ratio={ratio}; must be >= 1')
  order = np.argsort(step_times, kind='stable')
  tiers, start = [], 0
  while start < len(order):
    limit = ratio * step_times[order[start]]
    end = start
    while end < len(order) and step_times[order[end]] <= limit:
      end += 1
    tiers.append(np.sort(order[start:end]))
    start = end
  return tiers


@flax.struct.dataclass
class TierState:
  params: Params
  tier_params: Params  # leaves [num_tiers, ...]
  tier_counts: jax.Array  # [num_tiers] int32 updates per tier


def cross_tier_weights(counts: jax.Array) -> jax.Array:
  """FedAT's weights: counts handed out in reverse rank order over tiers that have updated."""
  valid = counts > 0
  num_valid = valid.sum()
  keyed = jnp.where(valid, counts, -1)
  order = jnp.argsort(-keyed, stable=True)  # ranks: most updates first, invalid last
  rank = jnp.argsort(order, stable=True)
  sorted_counts = keyed[order]
  mirrored = sorted_counts[jnp.clip(num_valid - 1 - rank, 0, counts.shape[0] - 1)]
  weights = jnp.where(valid, mirrored, 0).astype(jnp.float32)
  return weights / jnp.maximum(weights.sum(), 1.0)


def fedat_aggregator(num_tiers: int) -> Aggregator:
  """A tier round's updates (all with the same `group` = tier) -> new tier model -> new global."""

  def init(params: Params) -> TierState:
    tiers = jax.tree_util.tree_map(lambda p: jnp.broadcast_to(p, (num_tiers, *p.shape)), params)
    return TierState(params=params, tier_params=tiers, tier_counts=jnp.zeros(num_tiers, jnp.int32))

  def apply(state: TierState, updates: UpdateBatch) -> TierState:
    tier = updates.group[0]
    total = jnp.maximum(updates.weights.sum(), 1e-12)
    tier_model = jax.tree_util.tree_map(
      lambda c: jnp.tensordot(updates.weights, c, axes=1) / total, updates.client_params
    )
    tier_params = jax.tree_util.tree_map(
      lambda all_, m: all_.at[tier].set(m), state.tier_params, tier_model
    )
    counts = state.tier_counts.at[tier].add(1)
    weights = cross_tier_weights(counts)
    params = jax.tree_util.tree_map(lambda t: jnp.tensordot(weights, t, axes=1), tier_params)
    return TierState(params=params, tier_params=tier_params, tier_counts=counts)

  return Aggregator(init=init, apply=apply, needs_client_params=True)


class TieredScheduler:
  """Synchronous rounds inside each tier, tiers running asynchronously of each other."""

  def __init__(self, tiers: list[np.ndarray], cohort_size: int, local_work: LocalWork):
    if cohort_size < 1:
      raise ValueError(f'algorithm.kwargs.cohort_size={cohort_size}; must be >= 1')
    self.tiers = tiers
    self.cohort_size = cohort_size
    self.local_work = local_work
    self._outstanding: dict[int, set[TaskHandle]] = {}
    self._arrived: dict[int, list[TaskHandle]] = {}

  def start(self, sim: SchedulerContext) -> None:
    for tier in range(len(self.tiers)):
      self._start_round(sim, tier)

  def _start_round(self, sim: SchedulerContext, tier: int) -> None:
    members = self.tiers[tier]
    idle = np.intersect1d(members, sim.idle_clients())
    size = min(self.cohort_size, len(members))
    self._arrived[tier] = []
    self._outstanding[tier] = set()
    if len(idle) < size:
      retry = sim.next_availability_time()
      if np.isfinite(retry):
        sim.set_timer(retry, ('retry', tier))
      return
    for client in np.sort(sim.rng.choice(idle, size, replace=False)):
      latency = sim.sample_latency(client)
      steps = self.local_work.num_steps(int(sim.client_sizes[client]), latency)
      self._outstanding[tier].add(
        sim.dispatch(client, steps, latency=latency, metadata={'group': tier})
      )

  def _end_round(self, sim: SchedulerContext, tier: int) -> None:
    arrived = sorted(self._arrived[tier], key=lambda h: h.task_id)  # arrival-order free
    usable = [h for h in arrived if h.num_steps > 0]
    for h in arrived:
      if h.num_steps == 0:
        sim.discard(h, 'no_local_steps')
    if usable:
      sim.apply_updates(usable, [float(sim.client_sizes[h.client_id]) for h in usable])
    self._start_round(sim, tier)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    tier = handle.metadata['group']
    self._outstanding[tier].discard(handle)
    self._arrived[tier].append(handle)
    if not self._outstanding[tier]:
      self._end_round(sim, tier)

  def on_dropout(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    tier = handle.metadata['group']
    self._outstanding[tier].discard(handle)
    if not self._outstanding[tier]:
      self._end_round(sim, tier)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    kind, tier = payload
    if kind == 'retry' and not self._outstanding[tier] and not self._arrived[tier]:
      self._start_round(sim, tier)


@dataclasses.dataclass(frozen=True)
class FedATSettings(CohortSizeSettings, LocalWorkSettings, ClientTermsSettings, ServerEmaSettings):
  tier_ratio: float = setting(2.0, number(minimum=1), 'v: slowest / fastest step time in a tier')


@register('fedat', FedATSettings)
def fedat_algorithm(settings: FedATSettings, context: BuildContext) -> Algorithm:
  latency = context.latency
  assert latency is not None  # a run always has its latency model
  step_times = np.array([latency.expected_step_time(c) for c in range(context.num_clients)])
  tiers = speed_tiers(step_times, settings.tier_ratio)
  scheduler = TieredScheduler(tiers, settings.cohort_size, settings.local_work(context))
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(fedat_aggregator(len(tiers))),
    make_client_update=settings.make_client_update(),
  )
