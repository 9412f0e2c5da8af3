"""Per-client model-valued state as one table: every leaf `[num_clients, ...]`.

Some algorithms keep a model-shaped value per client across its tasks: MOON each client's last
local model, FedDyn each client's gradient state, ASO-Fed each client's (h, g_prev), CC-FedAvg
each client's last update or model. A `ClientTable` holds such a value for every client as one
pytree with a leading client axis, created when the federation's size is known, plus a host
mask of the rows written so far (a row never written holds `fill`; algorithms that treat a
first participation specially read `written`).

Tables are updated by pure functions (`write` returns a new table). The previous table's buffers
are donated to the update, so a write costs one row, not a copy of the table: the caller must
drop the old table (assign the result over it), as with any donated JAX value. As plain data
(arrays and a numpy mask), a table is saved in checkpoints like the rest of the simulation, and
its size, `num_clients` models, is what `memory_estimate` counts for the algorithm's
`client_tables`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.tree import row


@dataclasses.dataclass(frozen=True)
class ClientTable:
  """A pytree value per client.

  Attributes:
    values: the table; every leaf `[num_clients, ...]` (row `i` is client `i`'s value).
    written: `[num_clients]` bool (host): the rows written since the table was created.
  """

  values: Any
  written: np.ndarray

  @property
  def num_clients(self) -> int:
    return int(self.written.shape[0])


def create(template: Any, num_clients: int, fill: float = 0.0) -> ClientTable:
  """A table of `num_clients` rows shaped like `template` (a pytree of arrays), each `fill`."""
  if num_clients < 1:
    raise ValueError(f'num_clients={num_clients}; allowed: >= 1')
  values = jax.tree_util.tree_map(
    lambda leaf: jnp.full((num_clients, *jnp.shape(leaf)), fill, jnp.result_type(leaf)), template
  )
  return ClientTable(values=values, written=np.zeros(num_clients, bool))


def broadcast(value: Any, num_clients: int) -> ClientTable:
  """A table of `num_clients` rows, each a copy of `value` (a pytree of arrays), none written:
  per-client values that start from a shared one (Ditto's personalized models from w^0)."""
  if num_clients < 1:
    raise ValueError(f'num_clients={num_clients}; allowed: >= 1')
  values = jax.tree_util.tree_map(
    lambda leaf: jnp.broadcast_to(leaf, (num_clients, *jnp.shape(leaf))).copy(), value
  )
  return ClientTable(values=values, written=np.zeros(num_clients, bool))


def read(table: ClientTable, client: int) -> Any:
  """Client `client`'s row (the `fill` value if it was never written)."""
  return row(table.values, client)


def _set_row(values: Any, client: jax.Array, value: Any) -> Any:
  return jax.tree_util.tree_map(lambda column, v: column.at[client].set(v), values, value)


# The table's buffers are reused for the result: a row's write, not a copy of the table.
_set_row_in_place = jax.jit(_set_row, donate_argnums=0)


def write(table: ClientTable, client: int, value: Any) -> ClientTable:
  """The table with client `client`'s row set to `value` (a pytree shaped like one row).

  `table`'s arrays are donated: use only the returned table afterwards."""
  written = table.written.copy()
  written[client] = True
  values = _set_row_in_place(table.values, np.int32(client), value)
  return ClientTable(values=values, written=written)
