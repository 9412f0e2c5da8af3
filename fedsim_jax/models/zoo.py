"""Model architectures used by the reproduced papers, and the name registry."""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp

from fedsim_jax.models.bundle import Model


class MLP(nn.Module):
  """Fully connected ReLU network on flattened inputs."""

  hidden_sizes: Sequence[int]
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden_sizes:
      x = nn.relu(nn.Dense(width)(x))
    return nn.Dense(self.num_classes)(x)


class MnistCNN(nn.Module):
  """The MNIST CNN of FedCompass (Li et al. 2024, Table 8), about 582k parameters on 28x28x1.

  Conv 5x5 (32) -> ReLU -> MaxPool 2 -> Conv 5x5 (64) -> ReLU -> MaxPool 2 -> FC 512 -> ReLU -> FC.
  Convolutions are unpadded ('VALID'), as in the paper's output shapes (24x24, then 8x8).
  """

  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(32, (5, 5), padding='VALID')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(64, (5, 5), padding='VALID')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(512)(x))
    return nn.Dense(self.num_classes)(x)


class LeNet5(nn.Module):
  """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling, as used in FL papers.

  Conv 5x5 (6) -> pool -> Conv 5x5 (16) -> pool -> FC 120 -> FC 84 -> FC. The first convolution
  is 'SAME' on 28x28 inputs (so the feature map is 5x5x16 = 400 as on the original 32x32
  inputs) and 'VALID' on 32x32 inputs (CIFAR), matching the CC-FedAvg code's 400 -> 120 layer.
  """

  num_classes: int
  first_conv_padding: str = 'VALID'

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(6, (5, 5), padding=self.first_conv_padding)(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(16, (5, 5), padding='VALID')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(120)(x))
    x = nn.relu(nn.Dense(84)(x))
    return nn.Dense(self.num_classes)(x)


def _mlp(input_shape, num_classes, hidden_sizes: Sequence[int] = (200, 200)) -> nn.Module:
  return MLP(hidden_sizes=tuple(hidden_sizes), num_classes=num_classes)


def _mnist_cnn(input_shape, num_classes) -> nn.Module:
  return MnistCNN(num_classes=num_classes)


def _lenet5(input_shape, num_classes) -> nn.Module:
  padding = 'SAME' if input_shape[0] < 32 else 'VALID'
  return LeNet5(num_classes=num_classes, first_conv_padding=padding)


MODELS: dict[str, Callable[..., nn.Module]] = {
    'mlp': _mlp,
    'mnist_cnn': _mnist_cnn,
    'lenet5': _lenet5,
}


def get_model(name: str, input_shape: Sequence[int], num_classes: int, **kwargs) -> Model:
  """Builds a registered model bundle by name.

  Raises:
    ValueError: if `name` is not registered (the message lists the registered names).
  """
  if name not in MODELS:
    raise ValueError(f'model.name={name!r} is not a known model; allowed: {sorted(MODELS)}')
  module = MODELS[name](tuple(input_shape), num_classes, **kwargs)
  return Model(name=name, module=module, input_shape=tuple(input_shape), num_classes=num_classes)
