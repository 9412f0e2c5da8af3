"""Per-client tables: rows written by pure updates, unwritten rows at their fill value."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.strategy import client_table

TEMPLATE = {'w': jnp.ones((2, 3), jnp.float32), 'b': jnp.ones(3, jnp.bfloat16)}


def test_a_new_table_holds_the_fill_value_in_every_row():
  table = client_table.create(TEMPLATE, 4, fill=0.5)
  assert table.num_clients == 4 and not table.written.any()
  assert table.values['w'].shape == (4, 2, 3) and table.values['b'].dtype == jnp.bfloat16
  np.testing.assert_array_equal(client_table.read(table, 3)['w'], np.full((2, 3), 0.5))


def test_writing_sets_one_row_and_marks_it():
  table = client_table.create(TEMPLATE, 4)
  value = {'w': jnp.arange(6.0).reshape(2, 3), 'b': jnp.full(3, 2.0, jnp.bfloat16)}
  before = table.written
  table = client_table.write(table, 2, value)
  np.testing.assert_array_equal(table.written, [False, False, True, False])
  assert not before.any()  # the mask of the earlier table is not changed in place
  np.testing.assert_array_equal(client_table.read(table, 2)['w'], np.arange(6.0).reshape(2, 3))
  assert client_table.read(table, 2)['b'].dtype == jnp.bfloat16
  for other in (0, 1, 3):
    assert not np.any(client_table.read(table, other)['w'])
  table = client_table.write(table, 2, TEMPLATE)  # overwritten by a later value
  np.testing.assert_array_equal(client_table.read(table, 2)['w'], np.ones((2, 3)))


def test_a_write_reuses_the_tables_buffers():
  table = client_table.create(TEMPLATE, 3)
  old = table.values['w']
  table = client_table.write(table, 0, TEMPLATE)
  assert old.is_deleted()  # donated: the update did not copy the table


def test_a_table_pickles_with_its_rows():
  table = client_table.write(client_table.create(TEMPLATE, 3), 1, TEMPLATE)
  restored = pickle.loads(pickle.dumps(table))
  np.testing.assert_array_equal(restored.written, table.written)
  for a, b in zip(
    jax.tree_util.tree_leaves(restored.values), jax.tree_util.tree_leaves(table.values)
  ):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_a_table_needs_clients():
  with pytest.raises(ValueError, match='num_clients=0'):
    client_table.create(TEMPLATE, 0)
