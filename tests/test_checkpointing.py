import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.checkpointing import CheckpointError, Checkpoints


def _state():
  shared = jnp.arange(6.0).reshape(2, 3)
  rng = np.random.default_rng(3)
  rng.random(5)  # a generator part-way through its stream
  return {
    'params': {'w': shared, 'b': jnp.zeros(3, jnp.bfloat16)},
    'tasks': [shared, shared + 1],
    'counts': np.arange(4, dtype=np.int64),
    'rng': rng,
    'raw_key': jax.random.PRNGKey(7),
    'typed_key': jax.random.key(5),
    'time': 12.5,
  }


def test_a_saved_graph_reads_back_equal_with_shared_arrays_kept_shared(tmp_path):
  checkpoints = Checkpoints(tmp_path / 'ckpt')
  state = _state()
  step = checkpoints.save(state, {'version': 3})
  restored = checkpoints.load_latest()
  assert restored.step == step == 0
  assert restored.meta['version'] == 3 and restored.meta['format'] == 1
  got = restored.state
  assert got['tasks'][0] is got['params']['w']  # one array, written once
  np.testing.assert_array_equal(got['tasks'][1], np.arange(6.0).reshape(2, 3) + 1)
  assert got['params']['b'].dtype == jnp.bfloat16
  assert isinstance(got['params']['w'], jax.Array)
  assert got['counts'].dtype == np.int64 and isinstance(got['counts'], np.ndarray)
  assert got['rng'].random() == state['rng'].random()  # the stream continues where it was
  np.testing.assert_array_equal(got['raw_key'], state['raw_key'])
  np.testing.assert_array_equal(
    jax.random.uniform(got['typed_key'], (3,)), jax.random.uniform(state['typed_key'], (3,))
  )
  assert got['time'] == 12.5


def test_only_the_newest_checkpoints_are_kept(tmp_path):
  checkpoints = Checkpoints(tmp_path, keep=2)
  for version in range(4):
    checkpoints.save({'v': jnp.full(2, version)}, {'version': version})
  assert checkpoints.steps() == [2, 3]
  assert checkpoints.load_latest().meta['version'] == 3


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
  checkpoints = Checkpoints(tmp_path, keep=3)
  for version in range(2):
    checkpoints.save({'v': jnp.full(1000, float(version))}, {'version': version})
  meta_files = [
    os.path.join(root, name)
    for root, _, names in os.walk(tmp_path / '1' / 'meta')
    for name in names
    if name.endswith('.json') or name == 'metadata'
  ]
  assert meta_files
  # A wrong digest, as a damaged array file would give.
  for path in meta_files:
    with open(path) as f:
      text = f.read()
    if '"sha256"' in text:
      meta = json.loads(text)
      meta['sha256'] = '0' * 64
      with open(path, 'w') as f:
        json.dump(meta, f)
  with caplog.at_level('WARNING'):
    restored = Checkpoints(tmp_path, keep=3).load_latest()
  assert restored.meta['version'] == 0
  assert 'is damaged' in caplog.text and f'{os.sep}1 ' in caplog.text


def test_truncated_array_files_are_detected(tmp_path):
  checkpoints = Checkpoints(tmp_path, keep=3)
  noise = jax.random.normal(jax.random.PRNGKey(0), (5000,))  # incompressible
  checkpoints.save({'v': noise}, {'version': 0})
  checkpoints.save({'v': noise + 1}, {'version': 1})
  files = [
    os.path.join(root, name)
    for root, _, names in os.walk(tmp_path / '1' / 'arrays')
    for name in names
  ]
  largest = max(files, key=os.path.getsize)
  assert os.path.getsize(largest) > 15000  # the array's data (compressed)
  with open(largest, 'r+b') as f:
    f.truncate(100)
  assert Checkpoints(tmp_path, keep=3).load_latest().meta['version'] == 0


def test_no_checkpoint_reads_as_none_and_all_damaged_is_an_error(tmp_path):
  assert Checkpoints(tmp_path / 'none').load_latest() is None
  checkpoints = Checkpoints(tmp_path / 'one')
  checkpoints.save({'v': jnp.ones(3)}, {})
  for root, _, names in os.walk(tmp_path / 'one' / '0'):
    for name in names:
      os.remove(os.path.join(root, name))
  with pytest.raises(CheckpointError, match='no readable checkpoint'):
    Checkpoints(tmp_path / 'one').load_latest()


def test_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match='keep=0'):
    Checkpoints(tmp_path, keep=0)
