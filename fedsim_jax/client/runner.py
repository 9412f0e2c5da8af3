"""Drives a `ClientUpdate` through a task's local steps: inside jit (`run_local_training`: a
masked `lax.scan` over a static step bound, or a loop of exactly the task's steps), or one
jitted step at a time from the host (`local_step`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from fedsim_jax.client.local_update import ClientUpdate
from fedsim_jax.data.federated import BatchCursor, ClientDataArrays
from fedsim_jax.models import Params


def run_local_training(
  client_update: ClientUpdate,
  data: ClientDataArrays,
  start_params: Params,
  client_id: jax.Array,
  num_steps: jax.Array,
  key: jax.Array,
  task_inputs: Any = None,
  *,
  max_steps: int | None,
  sampling: str = 'shuffle',
  unroll: int | bool = 1,
) -> tuple[Params, dict[str, jax.Array]]:
  """Runs `num_steps` local steps (a traced value).

  With a static `max_steps` (needed under `vmap`, where tasks of one batch differ in steps)
  the steps run in a `lax.scan` of `max_steps`; steps at or past `num_steps` are computed but
  masked out: they change neither the params nor the optimizer state, so a task padded to a
  longer `max_steps` returns exactly the result of an unpadded run. With `max_steps=None` (one
  task per call: the loop backend) a `lax.while_loop` runs exactly `num_steps` steps, so one
  program serves every step count. Step `s` always reads the same batch (it depends only on
  `key` and `s`).

  Args:
    max_steps: static step bound (scan), or None (a loop of `num_steps` steps).
    unroll: `lax.scan` unroll factor; `True` unrolls every step (fast for convolutions on
      XLA:CPU, slow to compile for long tasks). Needs a static `max_steps`.

  Returns:
    `(delta, aux)` from `client_update.final`.
  """
  state = client_update.init(start_params, task_inputs)
  cursor = BatchCursor.start(data, client_id, key, client_update.batch_size, sampling)

  def body(carry, step):
    state, cursor = carry
    new_state, cursor = local_step(client_update, data, state, cursor, step, task_inputs)
    active = step < num_steps
    state = jax.tree_util.tree_map(lambda new, old: jnp.where(active, new, old), new_state, state)
    return (state, cursor), None

  if max_steps is None:
    if unroll is not True and unroll != 1:
      raise ValueError(f'unroll={unroll!r} needs a static max_steps')

    def loop_body(step, carry):
      state, cursor = carry
      return local_step(client_update, data, state, cursor, step, task_inputs)

    state, _ = jax.lax.fori_loop(0, num_steps, loop_body, (state, cursor))
  elif max_steps > 0:
    (state, _), _ = jax.lax.scan(body, (state, cursor), jnp.arange(max_steps), unroll=unroll)
  return client_update.final(state, start_params)


def local_step(
  client_update: ClientUpdate,
  data: ClientDataArrays,
  state: Any,
  cursor: BatchCursor,
  step: jax.Array,
  task_inputs: Any = None,
) -> tuple[Any, BatchCursor]:
  """Local step `step` of a task: its batch (`client_batch`'s, a function of the task key and
  `step` only) and one `client_update.step`. The scan in `run_local_training` and the host
  loop both use it; steps must come in order from 0 (the cursor caches epoch orders)."""
  batch, cursor = cursor.batch(data, step)
  return client_update.step(state, batch, task_inputs), cursor
