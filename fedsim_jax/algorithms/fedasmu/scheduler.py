"""FedASMU's scheduler: Alg. 1's periodic trigger with the staleness bound tau, and Alg. 2's
tasks split at the fetch epoch l* (see server.py's docstring for the paper's formulas and the
readings)."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from fedsim_jax.algorithms.fedasmu.device import FetchInputs, fetch_inputs
from fedsim_jax.algorithms.fedasmu.fetch import FetchPolicy
from fedsim_jax.models import Params
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.periodic_trigger import PeriodicTriggerScheduler


class FedasmuScheduler(PeriodicTriggerScheduler):
  """The periodic trigger with τ, tasks split at the fetch, per-device γ, v and the rewards.

  Args:
    trigger_period, trigger_count, concurrency, timing: the system model (periodic_trigger.py).
    local_work: 𝓛 as `client.local_steps` (one step per epoch) or integer `client.local_epochs`.
    tau: τ, uploads with t - o + 1 > τ are discarded.
    fetch_policy: chooses l* (None: no fetch, FedASMU-FA and -0).
    gamma_0, v_0: every device's initial γ, v.

  `FedasmuSettings` checks these (τ >= 1; with a fetch, 𝓛 of at least two whole epochs or
  steps and no time limit) where a config is read.
  """

  def __init__(
    self,
    trigger_period: float,
    trigger_count: int,
    concurrency: int,
    local_work: LocalWork,
    *,
    tau: int,
    fetch_policy: FetchPolicy | None,
    gamma_0: float = 1.0,
    v_0: float = 1.0,
    timing: str = 'periodic',
  ):
    super().__init__(
      trigger_period,
      trigger_count,
      concurrency,
      1,
      local_work,
      'uniform',
      max_staleness=tau - 1,
      timing=timing,
    )
    self.tau = tau
    self.fetch_policy = fetch_policy
    self.gamma_0, self.v_0 = float(gamma_0), float(v_0)
    self.gamma = np.zeros(0, np.float32)  # γ_i, v_i: set at start
    self.v = np.zeros(0, np.float32)
    self.fetches = 0  # fresh-model requests
    self.blends = 0  # requests answered with a newer model (g > o)
    self.rewards: list[float] = []

  @property
  def num_epochs(self) -> int:
    """𝓛 of the fetch policy."""
    if self.local_work.steps is not None:
      return self.local_work.steps
    assert self.local_work.epochs is not None  # LocalWork: steps, epochs or a time limit
    return int(self.local_work.epochs)

  def start(self, sim: SchedulerContext) -> None:
    self.gamma = np.full(sim.num_clients, self.gamma_0, np.float32)
    self.v = np.full(sim.num_clients, self.v_0, np.float32)
    super().start(sim)

  def _fetch_step(self, num_examples: int, fetch_epoch: int, total_steps: int) -> int:
    """The step after which epoch `fetch_epoch` ends (1..total_steps - 1)."""
    if self.local_work.steps is not None:
      return fetch_epoch
    covered = self.local_work.steps_for_epochs(fetch_epoch, num_examples)
    return max(1, min(covered, total_steps - 1))

  def _inputs(
    self,
    sim: SchedulerContext,
    client: int,
    global_params: Params,
    *,
    blend: bool,
    fresh_version: int = 0,
    download_version: int = 0,
  ) -> FetchInputs:
    return fetch_inputs(
      global_params,
      blend=blend,
      gamma=self.gamma[client],
      v=self.v[client],
      fresh_version=fresh_version,
      download_version=download_version,
    )

  def start_task(self, sim: SchedulerContext, client: int) -> None:
    latency = sim.sample_latency(client)
    num_examples = int(sim.client_sizes[client])
    total = self.local_work.num_steps(num_examples, latency)
    metadata = {'total_steps': total}
    if self.fetch_policy is None:
      sim.dispatch(client, total, latency=latency, metadata=metadata)
      return
    plain = self._inputs(sim, client, sim.params, blend=False)
    if total < 2:  # no step boundary to fetch at
      sim.dispatch(client, total, latency=latency, task_inputs=plain, metadata=metadata)
      return
    fetch_epoch = self.fetch_policy.propose(client, self.num_epochs)  # Alg. 2 line 1
    first = self._fetch_step(num_examples, fetch_epoch, total)
    # Segment 1: download w_o, train epochs 1..l*; it ends when the request reaches the server.
    segment = TaskLatency(
      communication=latency.communication / 2, overhead=latency.overhead, per_step=latency.per_step
    )
    sim.dispatch(
      client,
      first,
      latency=segment,
      task_inputs=plain,
      intermediate=True,
      metadata={**metadata, 'fetch_epoch': fetch_epoch, 'task_latency': latency},
      planned_steps=total,
    )

  def on_segment_end(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    """Alg. 2 lines 4-8: the server answers the request with w_g if g > o."""
    client, latency = handle.client_id, handle.metadata['task_latency']
    fresh_version, download_version = sim.version, handle.version
    fresh = fresh_version > download_version
    local = sim.task_params(handle)
    download = sim.download_time(client, latency) if fresh else 0.0
    segment = TaskLatency(
      communication=download + latency.communication / 2, overhead=0.0, per_step=latency.per_step
    )
    inputs = self._inputs(
      sim,
      client,
      sim.params if fresh else local,
      blend=fresh,
      fresh_version=fresh_version,
      download_version=download_version,
    )
    metadata = {key: value for key, value in handle.metadata.items() if key != 'task_latency'}
    sim.dispatch(
      client,
      metadata['total_steps'] - handle.num_steps,
      latency=segment,
      start_params=local,
      task_inputs=inputs,
      continues=handle,
      metadata={
        **metadata,
        'fresh_version': fresh_version,
        'blended': fresh,
        'fetch_time': sim.now,
      },
    )
    self.fetches += 1
    self.blends += int(fresh)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if handle.metadata.get('blended'):
      # The device's Formula 9 step and Alg. 2 line 12's reward, delivered with the upload.
      aux = sim.task_aux(handle)
      client = handle.client_id
      self.gamma[client] = aux['fetch_gamma']
      self.v[client] = aux['fetch_v']
      reward = float(aux['fetch_loss_before'] - aux['fetch_loss_after'])
      self.rewards.append(reward)
      assert self.fetch_policy is not None  # only a task with a fetch blends
      self.fetch_policy.observe(client, handle.metadata['fetch_epoch'], reward)
    super().on_arrival(sim, handle)

  def aggregate(self, sim: SchedulerContext, buffer: Sequence[TaskHandle]) -> None:
    """Formula 1 with 𝓛 = the whole task's steps (a segmented task's last segment ran fewer)."""
    batch = sim.updates(buffer, [1.0] * len(buffer), with_client_params=None)
    steps = np.zeros(np.shape(batch.num_steps), np.int32)
    steps[: len(buffer)] = [h.metadata['total_steps'] for h in buffer]
    sim.apply_update_batch(dataclasses.replace(batch, num_steps=jnp.asarray(steps)), buffer)

  def report(self) -> dict[str, Any]:
    rewards = np.asarray(self.rewards, np.float64)
    return {
      **super().report(),
      'fetches': self.fetches,
      'blends': self.blends,
      'mean_reward': float(rewards.mean()) if rewards.size else None,
      'mean_gamma': float(self.gamma.mean()) if self.gamma.size else None,
      'mean_v': float(self.v.mean()) if self.v.size else None,
    }
