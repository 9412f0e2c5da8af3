"""Model zoo: architectures match the papers' parameter counts and output shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.models import get_model, scale_to_unit_interval


def test_fedcompass_mnist_cnn_has_the_papers_parameter_count():
  model = get_model('mnist_cnn', (28, 28, 1), 10)
  params = model.init(jax.random.PRNGKey(0))
  # FedCompass Table 8: 832 + 51,264 + 524,800 + 5,130.
  assert model.num_params(params) == 832 + 51_264 + 524_800 + 5_130 == 582_026


@pytest.mark.parametrize('shape,expected', [((28, 28, 1), 61_706), ((32, 32, 3), 62_006)])
def test_lenet5_parameter_counts(shape, expected):
  # conv 6@5x5, conv 16@5x5, FC 400-120-84-10 (the classic LeNet-5 sizes).
  model = get_model('lenet5', shape, 10)
  assert model.num_params(model.init(jax.random.PRNGKey(0))) == expected


def test_mlp_sizes_and_logits_shape():
  model = get_model('mlp', (28, 28, 1), 10, hidden_sizes=(200, 200))
  params = model.init(jax.random.PRNGKey(0))
  assert model.num_params(params) == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10
  logits = model.apply(params, jnp.zeros((3, 28, 28, 1), jnp.uint8))
  assert logits.shape == (3, 10)


def test_loss_ignores_zero_weight_examples():
  model = get_model('mlp', (4,), 3, hidden_sizes=(5,))
  params = model.init(jax.random.PRNGKey(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 4))
  y = jnp.array([0, 1, 2, 1])
  full = model.loss(params, x[:2], y[:2])
  padded = model.loss(params, x, y, jnp.array([1.0, 1.0, 0.0, 0.0]))
  np.testing.assert_allclose(full, padded, rtol=1e-6)
  metrics = model.evaluate(params, x, y, jnp.array([1.0, 1.0, 0.0, 0.0]))
  assert float(metrics['count']) == 2.0


def test_uint8_inputs_are_scaled_to_unit_interval():
  x = jnp.array([0, 255], jnp.uint8)
  np.testing.assert_allclose(scale_to_unit_interval(x), [0.0, 1.0])


def test_unknown_model_name():
  with pytest.raises(ValueError, match='model.name'):
    get_model('resnet1000', (28, 28, 1), 10)
