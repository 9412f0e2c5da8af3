"""Model zoo of the reproduced papers: parameter counts, output shapes, one local step each,
per-token losses of the sequence models and the BatchNorm rule of `models.bundle`."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.client.local_update import client_optimizer, sgd_client_update
from fedsim_jax.executor import ClientTask, Executor
from fedsim_jax.models import Model, get_model

# RBG keys compile init programs ~5x faster than threefry on CPU; the init code is the same.
KEY = jax.random.key(0, impl='rbg')


def _shape_params(model):
  return jax.eval_shape(model.init, KEY)


# (name, input shape, classes, kwargs, trainable parameters). "paper": stated by the source;
# "computed": follows from the layer list only (no figure stated), pinned against drift.
PARAMETER_COUNTS = [
  ('mlp', (28, 28, 1), 10, {}, 199_210),  # the demo's 784-200-200-10
  ('mlp', (28, 28, 1), 10, {'norm': 'batch'}, 200_010),  # + BatchNorm scale and bias, 2 x 400
  ('fedavg_cnn', (28, 28, 1), 10, {}, 1_663_370),  # paper: McMahan et al. 2017, Sec. 3
  ('fedavg_cnn', (28, 28, 1), 62, {}, 1_690_046),  # computed (the figure quoted for EMNIST-62)
  ('fedasmu_cnn', (32, 32, 3), 10, {}, 297_066),  # computed (FedASMU Table 3 gives layers only)
  ('fedasmu_cnn', (32, 32, 3), 100, {}, 2_889_156),  # computed
  ('emnist_cnn', (28, 28, 1), 62, {}, 1_206_590),  # computed (Reddi et al. Table 7 layers)
  # paper: FedCompass Tables 10-11, 1,728 + 128 + 2 x 73,984 + 230,144 + 295,424 + 919,040
  # + 1,180,672 + 3,673,088 + 4,720,640 + 5,130.
  ('resnet18', (32, 32, 3), 10, {'norm': 'batch'}, 11_173_962),
  ('resnet18', (32, 32, 3), 100, {'norm': 'group'}, 11_220_132),  # computed (100-way head)
  ('resnet20', (32, 32, 3), 10, {}, 269_722),  # paper: He et al. 2016 Table 6, "0.27M"
  ('resnet20', (32, 32, 3), 100, {}, 275_572),  # computed (FedASMU's CIFAR-100 head)
  ('alexnet', (32, 32, 3), 10, {}, 2_472_266),  # computed (CIFAR AlexNet variant)
  # computed (FedBN Table 5's layers): convs 1,664 + 102,464 + 204,928, FC 12,847,104 +
  # 1,049,088 + 5,130, BatchNorm scale and bias 2 x 2,816.
  ('fedbn_cnn', (28, 28, 1), 10, {}, 14_216_010),
  ('vgg11', (32, 32, 3), 10, {}, 9_225_610),  # computed (CIFAR VGG-11, no norm)
  ('vgg11', (32, 32, 3), 10, {'norm': 'batch'}, 9_231_114),  # computed
  ('char_lstm', (80,), 90, {}, 820_522),  # computed (TFF Shakespeare vocabulary of 90)
  ('word_lstm', (20,), 10_004, {}, 4_050_748),  # computed; the ~4.05M quoted for Reddi et al.
  ('text_cnn', (400,), 2, {}, 3_360_902),  # computed (Kim 2014 sizes, 10k-word vocabulary)
]


@pytest.mark.parametrize('name,shape,classes,kwargs,expected', PARAMETER_COUNTS)
def test_parameter_counts(name, shape, classes, kwargs, expected):
  model = get_model(name, shape, classes, **kwargs)
  assert model.num_params(_shape_params(model), trainable_only=True) == expected


def test_resnet20_count_matches_he_et_al_layer_sum():
  # Option-A shortcuts have no parameters: stem 3x3x3x16 + BN, 9 blocks of two 3x3 convs + BN.
  stem = 3 * 3 * 3 * 16 + 2 * 16
  stage1 = 3 * (2 * 9 * 16 * 16 + 2 * 2 * 16)
  stage2 = (9 * 16 * 32 + 9 * 32 * 32 + 4 * 32) + 2 * (2 * 9 * 32 * 32 + 4 * 32)
  stage3 = (9 * 32 * 64 + 9 * 64 * 64 + 4 * 64) + 2 * (2 * 9 * 64 * 64 + 4 * 64)
  assert stem + stage1 + stage2 + stage3 + 64 * 10 + 10 == 269_722


def test_batchnorm_models_carry_running_statistics_outside_the_trainable_count():
  model = get_model('resnet18', (32, 32, 3), 10)
  assert model.has_state and model.state_collections == ('batch_stats',)
  shapes = _shape_params(model)
  assert set(shapes) == {'params', 'batch_stats'}
  # Running mean and variance per BN channel: 2 x 4,800 channels over all BN layers.
  assert model.num_params(shapes) - model.num_params(shapes, trainable_only=True) == 9_600
  for name, kwargs in [('resnet18', {'norm': 'group'}), ('vgg11', {}), ('mnist_cnn', {})]:
    plain = get_model(name, (32, 32, 3), 10, **kwargs)
    assert not plain.has_state and 'params' not in _shape_params(plain)


OUTPUT_SHAPES = [
  ('fedavg_cnn', (28, 28, 1), 62, {}),
  ('fedasmu_cnn', (32, 32, 3), 10, {}),
  ('emnist_cnn', (28, 28, 1), 62, {}),
  ('resnet18', (32, 32, 3), 10, {'norm': 'batch'}),
  ('resnet18', (32, 32, 3), 100, {'norm': 'group'}),
  ('resnet20', (32, 32, 3), 100, {}),
  ('alexnet', (32, 32, 3), 10, {}),
  ('fedbn_cnn', (28, 28, 1), 10, {}),
  ('vgg11', (32, 32, 3), 10, {}),
  ('char_lstm', (80,), 90, {}),
  ('word_lstm', (20,), 10_004, {}),
  ('text_cnn', (400,), 2, {}),
]


@pytest.mark.parametrize('name,shape,classes,kwargs', OUTPUT_SHAPES)
def test_output_shapes(name, shape, classes, kwargs):
  model = get_model(name, shape, classes, **kwargs)
  x = jax.ShapeDtypeStruct(
    (3, *shape), jnp.uint8 if model.input_dtype == jnp.float32 else jnp.int32
  )
  logits = jax.eval_shape(model.apply, _shape_params(model), x)
  per_position = name in ('char_lstm', 'word_lstm')
  assert logits.shape == ((3, shape[0], classes) if per_position else (3, classes))


def _batch(model, batch=3, seed=1):
  kx, ky = jax.random.split(jax.random.PRNGKey(seed))
  if model.input_dtype == jnp.float32:
    x = jax.random.randint(kx, (batch, *model.input_shape), 0, 256).astype(jnp.uint8)
    y = jax.random.randint(ky, (batch,), 0, model.num_classes)
  else:
    vocab = model.num_classes if model.pad_id is not None else model.module.vocab_size
    x = jax.random.randint(kx, (batch, *model.input_shape), 1, vocab)
    label_shape = (batch, *model.input_shape) if model.pad_id is not None else (batch,)
    y = jax.random.randint(ky, label_shape, 1, model.num_classes)
  return x, y, jnp.ones((batch,), jnp.float32)


def _one_step(model, optimizer=None, batch=None):
  client = sgd_client_update(model, optimizer or optax.sgd(0.05), batch_size=3)
  params = jax.jit(model.init)(KEY)
  batch = batch or _batch(model)
  state = jax.jit(client.step)(client.init(params, None), batch, None)
  delta, aux = client.final(state, params)
  return params, state, delta, aux


# Small inputs / narrow widths keep compiles cheap; the architectures are those of the zoo.
LOCAL_STEP = [
  ('fedasmu_cnn', (32, 32, 3), 10, {}),
  ('emnist_cnn', (28, 28, 1), 62, {}),
  ('fedavg_cnn', (28, 28, 1), 10, {}),
  # ResNet-20 with GroupNorm: 7 s, in `make test-slow`; ResNet blocks with BatchNorm: the
  # resnet18 tests below.
  pytest.param('resnet20', (16, 16, 3), 10, {'norm': 'group'}, marks=pytest.mark.slow),
  ('alexnet', (32, 32, 3), 10, {}),
  ('char_lstm', (12,), 90, {}),  # word_lstm: same layers (embed, LSTM, dense), slow set
  ('text_cnn', (12,), 2, {'vocab_size': 50}),
]
FULL_SIZE_STEP = [
  ('resnet18', (32, 32, 3), 10, {}),
  ('resnet18', (32, 32, 3), 100, {'norm': 'group'}),
  ('resnet20', (32, 32, 3), 100, {}),
  ('vgg11', (32, 32, 3), 10, {}),
  ('vgg11', (32, 32, 3), 10, {'norm': 'batch'}),
  ('word_lstm', (20,), 10_004, {}),
  ('text_cnn', (64,), 2, {}),
]


def _check_step_changes_params(name, shape, classes, kwargs):
  model = get_model(name, shape, classes, **kwargs)
  params, state, delta, aux = _one_step(model)
  assert np.isfinite(float(aux['train_loss'])) and int(aux['steps_run']) == 1
  moved = [float(jnp.abs(d).max()) for d in jax.tree_util.tree_leaves(model.split(delta)[0])]
  assert max(moved) > 0
  assert jax.tree_util.tree_structure(state.params) == jax.tree_util.tree_structure(params)


@pytest.mark.parametrize('name,shape,classes,kwargs', LOCAL_STEP)
def test_one_local_step_changes_params(name, shape, classes, kwargs):
  _check_step_changes_params(name, shape, classes, kwargs)


@pytest.mark.slow
@pytest.mark.parametrize('name,shape,classes,kwargs', FULL_SIZE_STEP)
def test_one_local_step_full_size(name, shape, classes, kwargs):
  _check_step_changes_params(name, shape, classes, kwargs)


# ---- BatchNorm: train-mode statistics, no optimizer updates, running statistics in eval ----


@pytest.fixture(scope='module')
def bn_step():
  """ResNet-18 with BatchNorm (narrow, 16x16) after one momentum + weight-decay step."""
  model = get_model('resnet18', (16, 16, 3), 10, norm='batch', width=8)
  optimizer = client_optimizer('momentum', 0.1, momentum=0.9, weight_decay=0.1)
  x, y, _ = _batch(model, batch=4)
  weights = jnp.array([1.0, 1.0, 1.0, 0.0])  # the last slot is padding
  params, state, delta, _ = _one_step(model, optimizer, (x, y, weights))
  return model, params, state, delta, (x, y, weights)


def test_batch_stats_change_and_are_set_not_optimised(bn_step):
  model, params, state, delta, (x, _, weights) = bn_step
  _, stats_start = model.split(params)
  _, stats_end = model.split(state.params)
  moved = jax.tree_util.tree_map(lambda a, b: float(jnp.abs(a - b).max()), stats_start, stats_end)
  assert min(jax.tree_util.tree_leaves(moved)) > 0
  # The statistics are exactly the train-mode update of the start model on the real examples:
  # no gradient, momentum or weight decay reached them.
  _, expected = model.apply_train(params, x, weights)
  jax.tree_util.tree_map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), stats_end, expected
  )
  # The optimizer state (momentum traces) covers the trainable part only.
  paths = [
    jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state.opt_state)[0]
  ]
  assert any('Conv_0' in p for p in paths) and not any('batch_stats' in p for p in paths)
  # The upload carries the statistics' delta, so the server averages them like weights.
  np.testing.assert_allclose(
    model.split(delta)[1]['batch_stats']['BatchNorm_0']['mean'],
    stats_end['batch_stats']['BatchNorm_0']['mean']
    - stats_start['batch_stats']['BatchNorm_0']['mean'],
    atol=1e-7,
  )


def test_batch_statistics_skip_zero_weight_examples(bn_step):
  model, params, _, _, (x, _, weights) = bn_step
  _, masked = model.apply_train(params, x, weights)
  _, real_only = model.apply_train(params, x[:3])
  jax.tree_util.tree_map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), masked, real_only
  )
  _, unchanged = model.apply_train(params, x, jnp.zeros(4))
  jax.tree_util.tree_map(np.testing.assert_array_equal, unchanged, model.split(params)[1])


def test_evaluation_uses_running_statistics(bn_step):
  model, _, state, _, (x, y, weights) = bn_step
  full = model.apply(state.params, x)
  np.testing.assert_array_equal(full, model.apply(state.params, x))
  # Batch-independent: one example's logits do not depend on the rest of the batch.
  np.testing.assert_allclose(model.apply(state.params, x[:1]), full[:1], rtol=1e-4, atol=1e-5)
  train_logits, _ = model.apply_train(state.params, x, weights)
  assert float(jnp.abs(train_logits - full).max()) > 1e-4
  metrics = model.evaluate(state.params, x, y, weights)
  assert float(metrics['count']) == 3.0


class _TinyBN(nn.Module):
  """Flatten -> BatchNorm -> Dense: the smallest module with running statistics."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train: bool = False, mask=None):
    x = x.reshape((x.shape[0], -1))
    mask = None if mask is None else mask[:, None]
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x, mask=mask)
    return nn.Dense(self.num_classes)(x)


def test_stateful_module_needs_state_collections():
  model = Model('tiny_bn', _TinyBN(2), (3,), 2)
  with pytest.raises(ValueError, match='state_collections'):
    model.init(KEY)


def test_executor_backends_carry_batch_statistics(toy_federation):
  fed = toy_federation
  model = Model(
    'tiny_bn',
    _TinyBN(fed.num_classes),
    fed.input_shape,
    fed.num_classes,
    state_collections=('batch_stats',),
  )
  params = model.init(KEY)
  update = sgd_client_update(model, optax.sgd(0.1), batch_size=8)  # small clients pad slots
  tasks = [
    ClientTask(client_id=c, num_steps=2 + c % 2, seed=c, start_params=params)
    for c in range(fed.num_clients)
  ]
  results = {
    backend: Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend=backend).run(
      tasks
    )
    for backend in ('vmap', 'loop')
  }
  stats = {b: r.deltas['batch_stats']['BatchNorm_0'] for b, r in results.items()}
  rows = len(tasks)
  np.testing.assert_allclose(stats['vmap']['mean'][:rows], stats['loop']['mean'][:rows], atol=1e-5)
  assert np.all(np.isfinite(stats['vmap']['var'][:rows]))
  assert np.all(np.abs(stats['vmap']['mean'][:rows]).max(axis=1) > 0)


def test_unknown_norm():
  with pytest.raises(ValueError, match='model.kwargs.norm'):
    get_model('resnet18', (32, 32, 3), 10, norm='layer')


# ---- Sequence models: token inputs, per-position labels, pad tokens ----


@pytest.fixture(scope='module')
def char_lstm():
  model = get_model('char_lstm', (8,), 20)
  return model, jax.jit(model.init)(KEY)


def test_token_inputs_are_not_scaled(char_lstm):
  model, params = char_lstm
  x = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10]])
  assert model.preprocess(x).dtype == jnp.int32
  np.testing.assert_array_equal(model.preprocess(x), x)


def test_char_lstm_loss_ignores_pad_tokens(char_lstm):
  model, params = char_lstm
  loss = jax.jit(model.loss)
  evaluate = jax.jit(model.evaluate)
  x = jax.random.randint(jax.random.PRNGKey(3), (2, 8), 1, 20)
  y = jnp.array([[5, 6, 7, 8, 9, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 0]])  # 0 = pad
  both, first_only = jnp.array([1.0, 1.0]), jnp.array([1.0, 0.0])
  metrics = evaluate(params, x, y, both)
  per_token = optax.softmax_cross_entropy_with_integer_labels(jax.jit(model.apply)(params, x), y)
  real = y != 0
  np.testing.assert_allclose(loss(params, x, y, both), per_token[real].mean(), rtol=1e-6)
  assert float(metrics['count']) == 12.0
  np.testing.assert_allclose(metrics['loss_sum'], per_token[real].sum(), rtol=1e-5)
  # Inputs after the last real label only reach pad-labelled positions (the LSTM is causal).
  x_tail = x.at[0, 5:].set(11).at[1, 7].set(12)
  np.testing.assert_allclose(loss(params, x_tail, y, both), loss(params, x, y, both), rtol=1e-6)
  # Example weights broadcast over positions: a zero-weight example drops out entirely.
  np.testing.assert_allclose(loss(params, x, y, first_only), per_token[0, :5].mean(), rtol=1e-6)
  assert float(evaluate(params, x, y, first_only)['count']) == 5.0
  # Without weights every non-pad token counts.
  np.testing.assert_allclose(model.cross_entropy(jnp.zeros((2, 8, 20)), y), np.log(20.0), rtol=1e-6)


def test_pad_id_can_be_disabled():
  model = get_model('char_lstm', (8,), 20, pad_id=None)
  y = jnp.zeros((2, 8), jnp.int32)
  assert float(model.label_weights(y, jnp.ones(2)).sum()) == 16.0
