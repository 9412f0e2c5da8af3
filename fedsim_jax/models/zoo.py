"""Model architectures used by the reproduced papers (`registry` registers them by name).

Parameter counts below are trainable parameters (BatchNorm running statistics excluded), for
the input shape and class count named; "paper" marks a count stated in the cited source,
"computed" one that only follows from the layer list. Unless a source states otherwise: ReLU
activations, flax default initialisers, and dropout layers that are present (at the source's
rates) but deterministic in the `Model` bundle, whose client step has no dropout PRNG (the
modules' `train_dropout=True` turns them on for callers that pass `rngs={'dropout': key}`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedsim_jax.models.pooling import max_pool_2x2
from fedsim_jax.str_enum import StrEnum


class MLP(nn.Module):
  """Fully connected ReLU network on flattened inputs; with `norm` 'batch' (or 'group'),
  normalisation after each hidden layer (FedBN's local BatchNorm on the MLP)."""

  hidden_sizes: Sequence[int]
  num_classes: int
  norm: str = 'none'
  groups: int = 2

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False, mask: jax.Array | None = None) -> jax.Array:
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden_sizes:
      x = nn.relu(_normalize(nn.Dense(width)(x), self.norm, self.groups, train, mask))
    return nn.Dense(self.num_classes)(x)


class TwoConvCNN(nn.Module):
  """Conv 5x5 (32) -> ReLU -> MaxPool 2 -> Conv 5x5 (64) -> ReLU -> MaxPool 2 -> FC 512 -> ReLU
  -> FC, with 'VALID' or 'SAME' convolutions: the shared body of `MnistCNN` and `FedAvgCNN`."""

  num_classes: int
  padding: str = 'VALID'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(32, (5, 5), padding=self.padding)(x))
    x = max_pool_2x2(x)
    x = nn.relu(nn.Conv(64, (5, 5), padding=self.padding)(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(512)(x))
    return nn.Dense(self.num_classes)(x)


class MnistCNN(TwoConvCNN):
  """The MNIST CNN of FedCompass (Li et al. 2024, Table 8), about 582k parameters on 28x28x1.

  Conv 5x5 (32) -> ReLU -> MaxPool 2 -> Conv 5x5 (64) -> ReLU -> MaxPool 2 -> FC 512 -> ReLU -> FC.
  Convolutions are unpadded ('VALID'), as in the paper's output shapes (24x24, then 8x8).
  """

  padding: str = 'VALID'


class LeNet5(nn.Module):
  """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling, as used in FL papers.

  Conv 5x5 (6) -> pool -> Conv 5x5 (16) -> pool -> FC 120 -> FC 84 -> FC. The first convolution
  is 'SAME' on 28x28 inputs (so the feature map is 5x5x16 = 400 as on the original 32x32
  inputs) and 'VALID' on 32x32 inputs (CIFAR), matching the CC-FedAvg code's 400 -> 120 layer.
  """

  num_classes: int
  first_conv_padding: str = 'VALID'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(6, (5, 5), padding=self.first_conv_padding)(x))
    x = max_pool_2x2(x)
    x = nn.relu(nn.Conv(16, (5, 5), padding='VALID')(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(120)(x))
    x = nn.relu(nn.Dense(84)(x))
    return nn.Dense(self.num_classes)(x)


class FedAvgCNN(TwoConvCNN):
  """The CNN of FedAvg (McMahan et al. 2017, Sec. 3; TFF's `create_original_fedavg_cnn_model`).

  Conv 5x5 (32, 'SAME') -> ReLU -> MaxPool 2 -> Conv 5x5 (64, 'SAME') -> ReLU -> MaxPool 2 ->
  FC 512 -> ReLU -> FC. Paper: 1,663,370 parameters on 28x28x1 with 10 classes; 1,690,046 with
  EMNIST's 62 classes (computed, the figure often quoted for FL EMNIST benchmarks).
  """

  padding: str = 'SAME'


class FedASMUCNN(nn.Module):
  """The "synthetic CNN" of FedASMU (Liu et al. 2024, appendix Table 3).

  conv1 (64 channels, kernel 2) -> activation -> conv2 (32, kernel 2) -> activation -> flatten
  -> dense (classes) -> softmax. Activation, stride and padding are not stated; the layer names
  are MXNet's, whose defaults (stride 1, no padding) are used, with ReLU. Table 3 says units=10
  although the CNN also runs on CIFAR-100; the head here has `num_classes` units. Computed:
  297,066 parameters on 32x32x3 with 10 classes (2,889,156 with 100).
  """

  num_classes: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(64, (2, 2), padding='VALID')(x))
    x = nn.relu(nn.Conv(32, (2, 2), padding='VALID')(x))
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class EmnistCNN(nn.Module):
  """The EMNIST CNN of Reddi et al. 2021 ("Adaptive Federated Optimization", Table 7; TFF's
  `create_conv_dropout_model`), also the straggler paper's EMNIST model.

  Conv 3x3 (32) -> ReLU -> Conv 3x3 (64) -> ReLU -> MaxPool 2 -> Dropout 0.25 -> FC 128 -> ReLU
  -> Dropout 0.5 -> FC. Convolutions unpadded (Keras default). Computed: 1,206,590 parameters on
  28x28x1 with 62 classes (1,690,046 is FedAvg's CNN, `fedavg_cnn`, not this one).
  """

  num_classes: int
  train_dropout: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(32, (3, 3), padding='VALID')(x))
    x = nn.relu(nn.Conv(64, (3, 3), padding='VALID')(x))
    x = max_pool_2x2(x)
    x = nn.Dropout(0.25, deterministic=not self.train_dropout)(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(128)(x))
    x = nn.Dropout(0.5, deterministic=not self.train_dropout)(x)
    return nn.Dense(self.num_classes)(x)


class Norm(StrEnum):
  """Normalisation after a convolution (`model.kwargs.norm`)."""

  NONE = 'none'
  BATCH = 'batch'  # BatchNorm: running statistics in the model's state
  GROUP = 'group'  # GroupNorm


class Shortcut(StrEnum):
  """A residual block's shortcut when the shape changes."""

  PROJECTION = 'projection'  # 1x1 conv + norm (option B)
  PAD = 'pad'  # stride-2 subsampling with zero-padded channels (option A, CIFAR ResNets)


NORMS = (Norm.BATCH.value, Norm.GROUP.value)


def _normalize(
  x: jax.Array, norm: str, groups: int, train: bool, mask: jax.Array | None
) -> jax.Array:
  """BatchNorm (PyTorch's momentum 0.1, eps 1e-5; statistics over `mask`ed examples in train
  mode) or GroupNorm with `groups` groups; 'none' is the identity."""
  if norm == Norm.BATCH:
    mask = None if mask is None else mask.reshape((-1,) + (1,) * (x.ndim - 1))
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x, mask=mask)
  if norm == Norm.GROUP:
    return nn.GroupNorm(num_groups=groups, epsilon=1e-5)(x)
  return x


class _BasicBlock(nn.Module):
  """He et al. 2016 basic block: conv3x3 (stride s) -> norm -> ReLU -> conv3x3 -> norm, plus the
  shortcut, then ReLU. Shortcut when the shape changes: 'projection' (1x1 conv + norm, option B)
  or 'pad' (stride-2 subsampling with zero-padded channels, option A of the CIFAR ResNets)."""

  features: int
  strides: int
  norm: str
  groups: int
  shortcut: str

  @nn.compact
  def __call__(self, x: jax.Array, train: bool, mask: jax.Array | None) -> jax.Array:
    conv = lambda f, k, s: nn.Conv(
      f, (k, k), strides=(s, s), padding=((k // 2, k // 2),) * 2, use_bias=False
    )
    y = conv(self.features, 3, self.strides)(x)
    y = nn.relu(_normalize(y, self.norm, self.groups, train, mask))
    y = conv(self.features, 3, 1)(y)
    y = _normalize(y, self.norm, self.groups, train, mask)
    if self.strides != 1 or x.shape[-1] != self.features:
      if self.shortcut == Shortcut.PROJECTION:
        x = _normalize(conv(self.features, 1, self.strides)(x), self.norm, self.groups, train, mask)
      else:
        x = x[:, :: self.strides, :: self.strides, :]
        extra = self.features - x.shape[-1]
        x = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet (He et al. 2016) for small images: 3x3 stem conv -> norm -> ReLU (no
  max-pool), stages of basic blocks (the first block of every stage after the first has stride
  2), global average pooling, dense head. Stateful (`batch_stats`) when `norm='batch'`."""

  num_classes: int
  stage_sizes: Sequence[int]
  widths: Sequence[int]
  norm: str = 'batch'
  groups: int = 2
  shortcut: str = 'projection'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False, mask: jax.Array | None = None) -> jax.Array:
    x = nn.Conv(self.widths[0], (3, 3), padding=((1, 1), (1, 1)), use_bias=False)(x)
    x = nn.relu(_normalize(x, self.norm, self.groups, train, mask))
    for stage, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for block in range(blocks):
        strides = 2 if stage > 0 and block == 0 else 1
        x = _BasicBlock(width, strides, self.norm, self.groups, self.shortcut)(x, train, mask)
    x = x.mean(axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


class FedBNCNN(nn.Module):
  """The digits CNN of FedBN (Li et al. 2021, appendix, Table 5), BatchNorm after every layer
  but the last: Conv 5x5 (64) -> BN -> ReLU -> MaxPool 2 -> Conv 5x5 (64) -> BN -> ReLU ->
  MaxPool 2 -> Conv 5x5 (128) -> BN -> ReLU -> FC 2048 -> BN -> ReLU -> FC 512 -> BN -> ReLU ->
  FC. Convolutions are 'SAME' with stride 1, so 28x28 inputs reach the first FC layer as
  7x7x128 = 6,272 features (the paper's). `channels` and `hidden` scale it down for tests."""

  num_classes: int
  channels: tuple[int, ...] = (64, 64, 128)
  hidden: tuple[int, ...] = (2048, 512)
  norm: str = 'batch'
  groups: int = 2

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False, mask: jax.Array | None = None) -> jax.Array:
    for index, channels in enumerate(self.channels):
      x = nn.Conv(channels, (5, 5), padding='SAME')(x)
      x = nn.relu(_normalize(x, self.norm, self.groups, train, mask))
      if index < 2:
        x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden:
      x = nn.Dense(width)(x)
      x = nn.relu(_normalize(x, self.norm, self.groups, train, mask))
    return nn.Dense(self.num_classes)(x)


class AlexNet(nn.Module):
  """AlexNet (Krizhevsky et al. 2012) adapted to 32x32 inputs, the common CIFAR variant
  (W. Yang's pytorch-classification `alexnet`): Conv 11x11/4 (64, pad 5) -> pool -> Conv 5x5
  (192, pad 2) -> pool -> Conv 3x3 (384) -> Conv 3x3 (256) -> Conv 3x3 (256) -> pool -> FC,
  ReLU after every conv, 2x2/2 max-pools, no normalisation or dropout. FedASMU does not state its
  variant. Computed: 2,472,266 parameters on 32x32x3 with 10 classes."""

  num_classes: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = max_pool_2x2(nn.relu(nn.Conv(64, (11, 11), strides=(4, 4), padding=((5, 5), (5, 5)))(x)))
    x = max_pool_2x2(nn.relu(nn.Conv(192, (5, 5), padding=((2, 2), (2, 2)))(x)))
    x = nn.relu(nn.Conv(384, (3, 3), padding=((1, 1), (1, 1)))(x))
    x = nn.relu(nn.Conv(256, (3, 3), padding=((1, 1), (1, 1)))(x))
    x = max_pool_2x2(nn.relu(nn.Conv(256, (3, 3), padding=((1, 1), (1, 1)))(x)))
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class VGG11(nn.Module):
  """VGG-11 (Simonyan & Zisserman 2015, configuration A) for 32x32 inputs, the common CIFAR
  variant (K. Liu's pytorch-cifar): 3x3 convs 64-M-128-M-256-256-M-512-512-M-512-512-M, each
  followed by the optional norm and ReLU, then one FC on the 512 features (no 4096-wide layers).
  FedASMU does not state its variant. Computed, 32x32x3 and 10 classes: 9,225,610 parameters
  with `norm='none'` (default), 9,231,114 with 'batch' or 'group'."""

  num_classes: int
  norm: str = 'none'
  groups: int = 2

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False, mask: jax.Array | None = None) -> jax.Array:
    for width in (64, 'M', 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512, 'M'):
      if isinstance(width, str):  # 'M'
        x = max_pool_2x2(x)
      else:
        x = nn.Conv(width, (3, 3), padding=((1, 1), (1, 1)))(x)
        x = nn.relu(_normalize(x, self.norm, self.groups, train, mask))
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class CharLSTM(nn.Module):
  """Shakespeare next-character model of LEAF (Caldas et al. 2018) and Reddi et al. 2021 (TFF's
  `create_recurrent_model`): embedding 8 -> LSTM 256 -> LSTM 256 -> FC vocab, logits at every
  position `[B, T, V]`. Keras masks pad inputs (`mask_zero`); here pads are fed through, which
  only changes outputs after the last real token of right-padded sequences, whose pad labels
  the loss excludes. Computed: 820,522 parameters for a vocabulary of 90 (86 characters + 4
  special ids, TFF's Shakespeare)."""

  vocab_size: int
  embed_dim: int = 8
  hidden: int = 256
  num_layers: int = 2

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    x = nn.Embed(self.vocab_size, self.embed_dim)(tokens)
    for _ in range(self.num_layers):
      x = nn.RNN(nn.LSTMCell(self.hidden))(x)
    return nn.Dense(self.vocab_size)(x)


class WordLSTM(nn.Module):
  """StackOverflow next-word model of Reddi et al. 2021 (Sec. C.4: vocabulary 10,000 plus 4
  special ids, embedding 96, one LSTM 670, dense 96, dense vocab; the straggler paper's LSTM).
  The dense 96 projection is linear, as in the TFF code. Computed: 4,050,748 parameters for a
  vocabulary of 10,004 (the ~4.05M quoted for this model; Keras-style LSTM, one bias per gate)."""

  vocab_size: int
  embed_dim: int = 96
  hidden: int = 670

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    x = nn.Embed(self.vocab_size, self.embed_dim)(tokens)
    x = nn.RNN(nn.LSTMCell(self.hidden))(x)
    x = nn.Dense(self.embed_dim)(x)
    return nn.Dense(self.vocab_size)(x)


class TextCNN(nn.Module):
  """Kim 2014 CNN for sentence classification (FedASMU's TextCNN for IMDb, whose settings it
  does not state): embedding -> 1-D convs of widths 3, 4, 5 with 100 filters each -> ReLU ->
  max over time -> concat -> dropout 0.5 -> FC. Kim's embedding dimension 300; the vocabulary
  size is a setting (default 10,000). Computed: 3,360,902 parameters for 10,000 words and 2
  classes."""

  num_classes: int
  vocab_size: int = 10_000
  embed_dim: int = 300
  filter_sizes: Sequence[int] = (3, 4, 5)
  num_filters: int = 100
  train_dropout: bool = False

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    x = nn.Embed(self.vocab_size, self.embed_dim)(tokens)
    pooled = [
      nn.relu(nn.Conv(self.num_filters, (k,), padding='VALID')(x)).max(axis=1)
      for k in self.filter_sizes
    ]
    x = jnp.concatenate(pooled, axis=-1)
    x = nn.Dropout(0.5, deterministic=not self.train_dropout)(x)
    return nn.Dense(self.num_classes)(x)
