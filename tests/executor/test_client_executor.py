"""Client engine and executor: batch sampling, masking, backend equality, bucketing."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.client import run_local_training, sgd_client_update
from fedsim_jax.data.federated import BatchCursor, ClientDataArrays, client_batch
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation
from fedsim_jax.executor import ClientTask, Executor, round_up_to_bucket
from fedsim_jax.models import get_model


def _setup(fed, model_name='mlp', lr=0.1, batch_size=5, **model_kwargs):
  model = get_model(model_name, fed.input_shape, fed.num_classes, **model_kwargs)
  params = model.init(jax.random.PRNGKey(0))
  update = sgd_client_update(model, optax.sgd(lr), batch_size)
  return model, params, update


def _assert_trees_close(a, b, atol):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def _assert_trees_equal(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class TestClientBatch:
  def test_shuffle_visits_every_example_once_per_epoch(self, toy_federation):
    data = toy_federation.device_arrays()
    client = 2
    size = int(toy_federation.client_sizes[client])
    batch_size = 4
    key = jax.random.PRNGKey(3)
    rows = []
    steps = 3 * size  # enough for 3 epochs plus
    for step in range(steps):
      x, y, w = client_batch(data, client, step, key, batch_size)
      assert float(w.sum()) == min(batch_size, size)
      # Recover the rows through the (unique) labels-and-pixels of each example.
      rows.extend(np.asarray(x).reshape(batch_size, -1)[: int(w.sum())].tolist())
    own = toy_federation.client_examples(client)[0].reshape(size, -1).tolist()
    first_epoch = rows[:size]
    assert sorted(map(tuple, first_epoch)) == sorted(map(tuple, own))
    second_epoch = rows[size : 2 * size]
    assert sorted(map(tuple, second_epoch)) == sorted(map(tuple, own))
    assert first_epoch != second_epoch  # a fresh order each epoch

  def test_small_client_uses_all_examples_and_masks_the_rest(self):
    fed = make_toy_federation(min_size=3, max_size=3)
    x, y, w = client_batch(fed.device_arrays(), 0, 0, jax.random.PRNGKey(0), batch_size=8)
    np.testing.assert_array_equal(np.asarray(w), [1, 1, 1, 0, 0, 0, 0, 0])
    assert sorted(np.asarray(y)[:3].tolist()) == sorted(fed.client_examples(0)[1].tolist())

  def test_with_replacement_stays_inside_the_client(self, toy_federation):
    data = toy_federation.device_arrays()
    own = set(toy_federation.client_examples(1)[1].tolist())
    for step in range(5):
      _, y, w = client_batch(data, 1, step, jax.random.PRNGKey(0), 6, 'with_replacement')
      assert set(np.asarray(y).tolist()) <= own
      assert float(w.sum()) == min(6, int(toy_federation.client_sizes[1]))

  @pytest.mark.parametrize(
    'sizes,batch_size', [((0, 1, 5, 7), 4), ((3, 32, 33, 64), 32), ((9, 10, 11, 1), 10)]
  )
  @pytest.mark.parametrize('use_vmap', [False, True])
  def test_cursor_gives_the_two_sort_formula_batches(self, sizes, batch_size, use_vmap):
    # Reference: the sampling rule written out directly, both epoch orders sorted every step.
    length = max(sizes)
    rng = np.random.default_rng(0)
    data = ClientDataArrays(
      x=jnp.asarray(rng.integers(0, 255, (4 * length, 2, 2, 1)).astype(np.uint8)),
      y=jnp.arange(4 * length, dtype=jnp.int32),
      indices=jnp.asarray(np.arange(4 * length).reshape(4, length), jnp.int32),
      sizes=jnp.asarray(sizes, jnp.int32),
    )
    key = jax.random.PRNGKey(11)

    def order(epoch, size):
      u = jax.random.uniform(jax.random.fold_in(key, epoch), (length,))
      return jnp.argsort(jnp.where(jnp.arange(length) < size, u, 2.0))

    def reference(client, step):
      size = max(sizes[client], 1)
      effective = min(batch_size, size)
      position = step * effective + np.arange(batch_size)
      first = (step * effective) // size
      slot = np.where(
        position // size == first,
        np.asarray(order(first, size))[position % size],
        np.asarray(order(first + 1, size))[position % size],
      )
      return np.asarray(data.y)[np.asarray(data.indices)[client, slot]]

    num_steps = 3 * length // batch_size + 3

    def walk(client):
      cursor = BatchCursor.start(data, client, key, batch_size)

      def body(cursor, step):
        (_, y, _), cursor = cursor.batch(data, step)
        return cursor, y

      return jax.lax.scan(body, cursor, jnp.arange(num_steps))[1]

    clients = jnp.arange(4)
    labels = jax.jit(jax.vmap(walk))(clients) if use_vmap else [jax.jit(walk)(c) for c in clients]
    for client in range(4):
      expected = np.stack([reference(client, s) for s in range(num_steps)])
      np.testing.assert_array_equal(np.asarray(labels[client]), expected)
      for step in (0, num_steps - 1):  # the stateless form agrees too
        _, y, _ = client_batch(data, client, step, key, batch_size)
        np.testing.assert_array_equal(np.asarray(y), expected[step])

  def test_unknown_sampling_mode_raises(self, toy_federation):
    with pytest.raises(ValueError, match='client.sampling'):
      client_batch(toy_federation.device_arrays(), 0, 0, jax.random.PRNGKey(0), 4, 'bogus')


class TestMasking:
  @pytest.mark.parametrize('sampling', ['shuffle', 'with_replacement'])
  def test_masked_run_equals_unmasked_shorter_run_exactly(self, toy_federation, sampling):
    _, params, update = _setup(toy_federation)
    data = toy_federation.device_arrays()
    key = jax.random.PRNGKey(7)

    def run(num_steps, max_steps):
      fn = jax.jit(
        lambda p: run_local_training(
          update, data, p, 3, num_steps, key, max_steps=max_steps, sampling=sampling
        )
      )
      return fn(params)

    short_delta, short_aux = run(5, 5)
    masked_delta, masked_aux = run(5, 12)
    _assert_trees_equal(short_delta, masked_delta)
    assert int(masked_aux['steps_run']) == 5
    np.testing.assert_array_equal(short_aux['train_loss'], masked_aux['train_loss'])
    longer_delta, _ = run(6, 12)
    assert not np.array_equal(
      np.asarray(jax.tree_util.tree_leaves(longer_delta)[0]),
      np.asarray(jax.tree_util.tree_leaves(masked_delta)[0]),
    )

  def test_zero_steps_give_zero_delta(self, toy_federation):
    _, params, update = _setup(toy_federation)
    delta, aux = run_local_training(
      update, toy_federation.device_arrays(), params, 0, 0, jax.random.PRNGKey(0), max_steps=4
    )
    for leaf in jax.tree_util.tree_leaves(delta):
      assert not np.any(np.asarray(leaf))
    assert int(aux['steps_run']) == 0


class TestBackends:
  def _tasks(self, params, shared=True):
    tasks = []
    for i in range(7):
      start = params if shared else jax.tree_util.tree_map(lambda p, i=i: p + 0.01 * i, params)
      tasks.append(
        ClientTask(client_id=i % 6, num_steps=3 + (i % 2) * 2, seed=100 + i, start_params=start)
      )
    return tasks

  @pytest.mark.parametrize('model_name,shared', [('mlp', True), ('mlp', False), ('lenet5', False)])
  def test_vmap_and_loop_backends_agree(self, model_name, shared):
    fed = (
      make_toy_federation(image_shape=(12, 12, 1))
      if model_name == 'lenet5'
      else make_toy_federation()
    )
    _, params, update = _setup(fed, model_name)
    tasks = self._tasks(params, shared)
    results = {}
    for backend in ('vmap', 'loop'):
      executor = Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend=backend)
      results[backend] = executor.run(tasks)
    for i in range(len(tasks)):
      row = lambda tree, i=i: jax.tree_util.tree_map(lambda a: a[i], tree)
      _assert_trees_close(row(results['vmap'].deltas), row(results['loop'].deltas), atol=1e-5)
    np.testing.assert_array_equal(
      results['vmap'].aux['steps_run'][:7], [t.num_steps for t in tasks]
    )

  def test_result_of_a_task_does_not_depend_on_its_batch(self, toy_federation):
    _, params, update = _setup(toy_federation)
    executor = Executor(update, toy_federation.device_arrays(), jax.random.PRNGKey(1))
    tasks = self._tasks(params)
    together = executor.run(tasks)
    alone = executor.run([tasks[4]])
    _assert_trees_close(
      jax.tree_util.tree_map(lambda a: a[4], together.deltas),
      jax.tree_util.tree_map(lambda a: a[0], alone.deltas),
      atol=1e-6,
    )

  def test_bucketing_bounds_the_number_of_programs(self, toy_federation):
    _, params, update = _setup(toy_federation)
    executor = Executor(update, toy_federation.device_arrays(), jax.random.PRNGKey(1))
    for num_tasks in (9, 10):  # both bucket to 10 tasks
      for steps in (9, 10):  # both bucket to 10 steps
        executor.run([ClientTask(0, steps, i, params) for i in range(num_tasks)])
    assert executor.num_compiled_programs == 1
    assert executor.steps_computed == 4 * 10 * 10

  def test_unknown_backend(self, toy_federation):
    _, params, update = _setup(toy_federation)
    with pytest.raises(ValueError, match='executor.backend'):
      Executor(update, toy_federation.device_arrays(), jax.random.PRNGKey(0), backend='gpu')


@pytest.mark.parametrize(
  'n,bits,expected',
  [
    (0, 3, 0),
    (1, 3, 1),
    (8, 3, 8),
    (9, 3, 10),
    (10, 3, 10),
    (11, 3, 12),
    (17, 3, 20),
    (100, 3, 112),
    (100, 4, 104),
    (1000, 3, 1024),
  ],
)
def test_round_up_to_bucket(n, bits, expected):
  assert round_up_to_bucket(n, bits) == expected


@pytest.mark.parametrize('bits', [2, 3, 4])
def test_bucket_padding_and_count_bounds(bits):
  buckets = {round_up_to_bucket(n, bits) for n in range(1, 4097)}
  assert len(buckets) <= (1 << bits) + (1 << (bits - 1)) * 12
  for n in range(1, 4097):
    b = round_up_to_bucket(n, bits)
    assert n <= b <= n * (1 + 2.0 ** (1 - bits)) + 1e-9


def test_host_step_loop_matches_the_scanned_task():
  fed = make_toy_federation()
  _, params, update = _setup(fed)
  tasks = [ClientTask(client_id=c, num_steps=3 + c, seed=c, start_params=params) for c in range(4)]
  results = {}
  for step_loop in ('scan', 'host'):
    executor = Executor(
      update, fed.device_arrays(), jax.random.PRNGKey(1), backend='loop', step_loop=step_loop
    )
    results[step_loop] = executor.run(tasks)
  _assert_trees_close(results['scan'].deltas, results['host'].deltas, atol=1e-5)
  np.testing.assert_array_equal(results['host'].aux['steps_run'], [3, 4, 5, 6])
  with pytest.raises(ValueError, match='step_loop'):
    Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend='vmap', step_loop='host')


@pytest.mark.parametrize('step_loop', ['scan', 'host'])
def test_threaded_loop_gives_the_one_thread_results_in_task_order(step_loop):
  fed = make_toy_federation()
  _, params, update = _setup(fed)
  # Different step counts, so tasks finish out of order under two threads.
  tasks = [
    ClientTask(
      client_id=c % 6,
      num_steps=1 + (7 * c) % 9,
      seed=c,
      start_params=jax.tree_util.tree_map(lambda p, c=c: p + 0.01 * c, params),
    )
    for c in range(9)
  ]
  results = [
    Executor(
      update,
      fed.device_arrays(),
      jax.random.PRNGKey(1),
      backend='loop',
      step_loop=step_loop,
      threads=threads,
    ).run(tasks)
    for threads in (1, 3)
  ]
  _assert_trees_equal(results[0].deltas, results[1].deltas)
  _assert_trees_equal(results[0].aux, results[1].aux)
  np.testing.assert_array_equal(results[1].aux['steps_run'], [t.num_steps for t in tasks])


def test_threads_need_the_loop_backend_and_a_positive_count():
  fed = make_toy_federation()
  _, _, update = _setup(fed)
  for backend, threads in (('vmap', 2), ('loop', 0), ('loop', 1.5)):
    with pytest.raises(ValueError, match='executor.threads'):
      Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend=backend, threads=threads)


def test_loop_backend_runs_exact_steps_in_one_program():
  fed = make_toy_federation()
  _, params, update = _setup(fed)
  tasks = [
    ClientTask(client_id=c % 6, num_steps=steps, seed=c, start_params=params)
    for c, steps in enumerate((1, 3, 4, 9, 13, 17))
  ]  # six different step buckets
  exact = Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend='loop')
  result = exact.run(tasks)
  assert exact.num_compiled_programs == 1
  assert exact._one_task._cache_size() == 1
  assert exact.steps_computed == exact.steps_run == 47
  # The same deltas as the bucketed, masked scan (unroll > 1 keeps it), bit for bit.
  scanned = Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend='loop', unroll=2)
  _assert_trees_equal(result.deltas, scanned.run(tasks).deltas)
  assert scanned.num_compiled_programs == 6 and scanned.steps_computed > 47


@pytest.mark.parametrize('backend', ['vmap', 'loop'])
def test_stream_hyperparameters_train_each_stream_with_its_own_learning_rate(backend):
  # One executor over two streams whose client learning rates are program arguments gives each
  # task exactly what an executor built with that learning rate as a constant gives.
  fed = make_toy_federation(num_clients=4)
  model, params, _ = _setup(fed)
  rates = (0.1, 0.03)

  def update_for(values):
    return sgd_client_update(model, optax.sgd(values['learning_rate']), 5)

  keys = jnp.stack([jax.random.PRNGKey(1), jax.random.PRNGKey(2)])
  shared = Executor(
    update_for({'learning_rate': rates[0]}),
    fed.device_arrays(),
    keys,
    backend=backend,
    client_update_for=update_for,
    stream_hyperparameters={'learning_rate': list(rates)},
  )
  tasks = [ClientTask(client, 3, client, params, stream=client % 2) for client in range(4)]
  batch = shared.run(tasks)
  for stream, rate in enumerate(rates):
    alone = Executor(
      sgd_client_update(model, optax.sgd(rate), 5),
      fed.device_arrays(),
      keys[stream],
      backend=backend,
    )
    mine = [i for i, task in enumerate(tasks) if task.stream == stream]
    expected = alone.run([dataclasses.replace(tasks[i], stream=0) for i in mine])
    for row, i in enumerate(mine):
      _assert_trees_equal(
        jax.tree_util.tree_map(lambda leaf: leaf[i], batch.deltas),
        jax.tree_util.tree_map(lambda leaf: leaf[row], expected.deltas),
      )


def test_stream_hyperparameters_need_a_client_update_builder():
  fed = make_toy_federation(num_clients=2)
  _, _, update = _setup(fed)
  with pytest.raises(ValueError, match='needs client_update_for'):
    Executor(
      update,
      fed.device_arrays(),
      jax.random.PRNGKey(0),
      stream_hyperparameters={'learning_rate': [0.1]},
    )
