"""The model registry: each architecture of the zoo under a name, with its settings dataclass.

A config selects a model with `model.name` and `model.kwargs` (the fields of its settings
dataclass; missing ones take their defaults), and optionally `model.module`, a user module
imported first that registers a model of its own:

    @dataclasses.dataclass(frozen=True)
    class WideSettings(Settings):
      width: int = setting(64, positive(integer=True), 'hidden units')

    @MODELS.register('wide', WideSettings)
    def wide(settings: WideSettings, context: ModelContext) -> Model:
      return context.bundle(MLP(hidden_sizes=(settings.width,), num_classes=context.num_classes))

A factory receives its validated settings and a `ModelContext` (the registered name, the
dataset's input shape and class count) and returns a `Model` bundle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fedsim_jax.models.bundle import Model, identity_tokens
from fedsim_jax.models.zoo import (
  MLP,
  NORMS,
  VGG11,
  AlexNet,
  CharLSTM,
  EmnistCNN,
  FedASMUCNN,
  FedAvgCNN,
  FedBNCNN,
  LeNet5,
  MnistCNN,
  Norm,
  ResNet,
  Shortcut,
  TextCNN,
  WordLSTM,
)
from fedsim_jax.registry import Registry, Selection
from fedsim_jax.settings import (
  Check,
  ConfigError,
  Settings,
  boolean,
  one_of,
  positive,
  setting,
  tuple_of,
)


@dataclasses.dataclass(frozen=True)
class ModelContext:
  """What a model's factory knows of the run besides its settings.

  Attributes:
    name: the registered name (recorded as `Model.name`).
    input_shape: shape of one stored example (e.g. `(28, 28, 1)`, or `(80,)` token ids).
    num_classes: classes (the vocabulary size of next-token models).
  """

  name: str
  input_shape: tuple[int, ...]
  num_classes: int

  def bundle(self, module: nn.Module, **options: Any) -> Model:
    """`module` as this run's `Model`; `options` are `Model`'s other fields (`preprocess`,
    `input_dtype`, `pad_id`, `state_collections`)."""
    return Model(
      name=self.name,
      module=module,
      input_shape=self.input_shape,
      num_classes=self.num_classes,
      **options,
    )

  def normalised(self, module: nn.Module, norm: str) -> Model:
    """`bundle(module)`, carrying BatchNorm's running statistics when `norm` is 'batch'."""
    return self.bundle(module, state_collections=('batch_stats',) if norm == Norm.BATCH else ())

  def tokens(self, module: nn.Module, pad_id: int | None = None) -> Model:
    """`bundle(module)` for integer token ids (unscaled int32 inputs); `pad_id` is the label
    excluded from loss and accuracy (next-token models)."""
    return self.bundle(module, preprocess=identity_tokens, input_dtype=jnp.int32, pad_id=pad_id)


ModelFactory = Callable[[Any, ModelContext], Model]

MODELS: Registry[ModelFactory] = Registry('model', 'model')


def build_model(selection: Selection, context: ModelContext) -> Model:
  """The model a resolved `model` section selects, built for `context`."""
  return MODELS.get(selection.name).factory(selection.settings, context)


def get_model(name: str, input_shape: Sequence[int], num_classes: int, **kwargs: Any) -> Model:
  """Model `name` with settings `kwargs` (fields of its settings dataclass) for inputs of
  `input_shape` and `num_classes` classes: `build_model` in one call.

  Raises:
    ConfigError: an unknown name (naming the registered ones) or an invalid setting.
  """
  context = ModelContext(name, tuple(input_shape), num_classes)
  return build_model(MODELS.resolve(name, kwargs), context)


def _widths(name: str, value: Any) -> None:
  if not isinstance(value, (tuple, list)) or not all(
    isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
  ):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: a tuple of integers >= 1')


_widths.allowed = 'a tuple of integers >= 1'  # type: ignore[attr-defined]

_GROUPS: Check = positive(integer=True)
_PAD_ID: Check = positive(integer=True, allow_zero=True, optional=True)


@dataclasses.dataclass(frozen=True)
class NoSettings(Settings):
  """An architecture without settings of its own."""


@dataclasses.dataclass(frozen=True)
class MLPSettings(Settings):
  hidden_sizes: tuple[int, ...] = setting((200, 200), _widths, 'hidden layer widths')
  norm: str = setting('none', one_of(Norm), 'normalisation after each hidden layer (FedBN: batch)')
  groups: int = setting(2, positive(integer=True), 'GroupNorm groups')

  # The setting that sizes the model, as a memory refusal names it.
  size_setting = 'hidden_sizes'


@dataclasses.dataclass(frozen=True)
class DropoutSettings(Settings):
  train_dropout: bool = setting(False, boolean, 'dropout on in training (needs a dropout PRNG)')


@dataclasses.dataclass(frozen=True)
class ResNetSettings(Settings):
  norm: str = setting('batch', one_of(NORMS), 'normalisation: BatchNorm or GroupNorm')
  groups: int = setting(2, _GROUPS, 'GroupNorm groups (Hsieh et al. 2020: 2)')


@dataclasses.dataclass(frozen=True)
class ResNet18Settings(ResNetSettings):
  width: int = setting(64, positive(integer=True), "first stage's width (the paper: 64)")


@dataclasses.dataclass(frozen=True)
class VGGSettings(Settings):
  norm: str = setting('none', one_of(Norm), 'normalisation after each conv')
  groups: int = setting(2, _GROUPS, 'GroupNorm groups')


@dataclasses.dataclass(frozen=True)
class NextTokenSettings(Settings):
  pad_id: int | None = setting(0, _PAD_ID, 'label excluded from loss and accuracy (None: none)')


@dataclasses.dataclass(frozen=True)
class TextCNNSettings(DropoutSettings):
  vocab_size: int = setting(10_000, positive(integer=True), 'vocabulary size')
  embed_dim: int = setting(300, positive(integer=True), 'embedding dimension (Kim 2014: 300)')


@MODELS.register('mlp', MLPSettings)
def mlp(settings: MLPSettings, context: ModelContext) -> Model:
  """Fully connected ReLU network on flattened inputs (CC-FedAvg, the demo)."""
  module = MLP(
    hidden_sizes=settings.hidden_sizes,
    num_classes=context.num_classes,
    norm=settings.norm,
    groups=settings.groups,
  )
  return context.normalised(module, settings.norm)


@MODELS.register('mnist_cnn', NoSettings)
def mnist_cnn(settings: NoSettings, context: ModelContext) -> Model:
  """The MNIST CNN of FedCompass (Table 8)."""
  return context.bundle(MnistCNN(num_classes=context.num_classes))


@MODELS.register('lenet5', NoSettings)
def lenet5(settings: NoSettings, context: ModelContext) -> Model:
  """LeNet-5; the first convolution is 'SAME' on inputs smaller than 32x32 (FedASMU, CC-FedAvg)."""
  padding = 'SAME' if context.input_shape[0] < 32 else 'VALID'
  return context.bundle(LeNet5(num_classes=context.num_classes, first_conv_padding=padding))


@MODELS.register('fedavg_cnn', NoSettings)
def fedavg_cnn(settings: NoSettings, context: ModelContext) -> Model:
  """The CNN of FedAvg (McMahan et al. 2017)."""
  return context.bundle(FedAvgCNN(num_classes=context.num_classes))


@MODELS.register('fedasmu_cnn', NoSettings)
def fedasmu_cnn(settings: NoSettings, context: ModelContext) -> Model:
  """The synthetic CNN of FedASMU (appendix Table 3)."""
  return context.bundle(FedASMUCNN(num_classes=context.num_classes))


@MODELS.register('emnist_cnn', DropoutSettings)
def emnist_cnn(settings: DropoutSettings, context: ModelContext) -> Model:
  """The EMNIST CNN of Reddi et al. 2021 (the straggler paper's)."""
  module = EmnistCNN(num_classes=context.num_classes, train_dropout=settings.train_dropout)
  return context.bundle(module)


@MODELS.register('resnet18', ResNet18Settings)
def resnet18(settings: ResNet18Settings, context: ModelContext) -> Model:
  """ResNet-18 with a CIFAR stem (FedCompass: BatchNorm; CC-FedAvg, Reddi et al.: GroupNorm).

  FedCompass Tables 10-11: 11,173,962 parameters with BatchNorm and 10 classes. Reddi et al.
  follow Hsieh et al. 2020 with 2 groups (the default); CC-FedAvg's code uses 16. `width` is
  the first stage's width (smaller values: a narrower network of the same structure)."""
  width = settings.width
  module = ResNet(
    num_classes=context.num_classes,
    stage_sizes=(2, 2, 2, 2),
    widths=(width, 2 * width, 4 * width, 8 * width),
    norm=settings.norm,
    groups=settings.groups,
    shortcut=Shortcut.PROJECTION,
  )
  return context.normalised(module, settings.norm)


@MODELS.register('resnet20', ResNetSettings)
def resnet20(settings: ResNetSettings, context: ModelContext) -> Model:
  """ResNet-20 of He et al. 2016 (CIFAR: 3 stages of 3 blocks, widths 16-32-64, zero-padding
  shortcuts; 269,722 parameters with 10 classes), FedASMU's "ResNet"."""
  module = ResNet(
    num_classes=context.num_classes,
    stage_sizes=(3, 3, 3),
    widths=(16, 32, 64),
    norm=settings.norm,
    groups=settings.groups,
    shortcut=Shortcut.PAD,
  )
  return context.normalised(module, settings.norm)


@dataclasses.dataclass(frozen=True)
class FedBNSettings(Settings):
  channels: tuple[int, ...] = setting(
    (64, 64, 128), tuple_of(positive(integer=True), 'three integers >= 1'), 'convolution widths'
  )
  hidden: tuple[int, ...] = setting(
    (2048, 512), tuple_of(positive(integer=True), 'two integers >= 1'), 'hidden FC widths'
  )
  norm: str = setting('batch', one_of(Norm), 'normalisation after each layer but the last')
  groups: int = setting(2, _GROUPS, 'GroupNorm groups')

  def check(self, prefix: str) -> None:
    if len(self.channels) != 3 or len(self.hidden) != 2:
      raise ConfigError(
        f'{prefix}channels={self.channels!r}, hidden={self.hidden!r} are invalid; allowed: '
        'three convolution widths and two hidden widths'
      )


@MODELS.register('fedbn_cnn', FedBNSettings)
def fedbn_cnn(settings: FedBNSettings, context: ModelContext) -> Model:
  """The digits CNN of FedBN (Li et al. 2021, Table 5): BatchNorm after every hidden layer."""
  module = FedBNCNN(
    num_classes=context.num_classes,
    channels=tuple(settings.channels),
    hidden=tuple(settings.hidden),
    norm=settings.norm,
    groups=settings.groups,
  )
  return context.normalised(module, settings.norm)


@MODELS.register('alexnet', NoSettings)
def alexnet(settings: NoSettings, context: ModelContext) -> Model:
  """AlexNet adapted to 32x32 inputs (the common CIFAR variant)."""
  return context.bundle(AlexNet(num_classes=context.num_classes))


@MODELS.register('vgg11', VGGSettings)
def vgg11(settings: VGGSettings, context: ModelContext) -> Model:
  """VGG-11 for 32x32 inputs (the common CIFAR variant), optionally normalised."""
  module = VGG11(num_classes=context.num_classes, norm=settings.norm, groups=settings.groups)
  return context.normalised(module, settings.norm)


@MODELS.register('char_lstm', NextTokenSettings)
def char_lstm(settings: NextTokenSettings, context: ModelContext) -> Model:
  """Next-character LSTM of LEAF / Reddi et al. 2021 (Shakespeare)."""
  return context.tokens(CharLSTM(vocab_size=context.num_classes), settings.pad_id)


@MODELS.register('word_lstm', NextTokenSettings)
def word_lstm(settings: NextTokenSettings, context: ModelContext) -> Model:
  """Next-word LSTM of Reddi et al. 2021 (StackOverflow)."""
  return context.tokens(WordLSTM(vocab_size=context.num_classes), settings.pad_id)


@MODELS.register('text_cnn', TextCNNSettings)
def text_cnn(settings: TextCNNSettings, context: ModelContext) -> Model:
  """Kim 2014 CNN for sentence classification (FedASMU's IMDb model)."""
  if context.input_shape[0] < 5:
    raise ConfigError(
      f"model.name='text_cnn' is invalid for inputs of length {context.input_shape[0]}; "
      'allowed: sequences of length >= 5 (the widest filter)'
    )
  module = TextCNN(
    num_classes=context.num_classes,
    vocab_size=settings.vocab_size,
    embed_dim=settings.embed_dim,
    train_dropout=settings.train_dropout,
  )
  return context.tokens(module)
