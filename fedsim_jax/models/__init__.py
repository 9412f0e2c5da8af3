"""Models: flax modules wrapped in a `Model` bundle (init, apply, loss, eval metrics), registered
by name in `MODELS` with their settings dataclasses."""

from fedsim_jax.models.bundle import Model, Params, identity_tokens, scale_to_unit_interval
from fedsim_jax.models.registry import MODELS, ModelContext, build_model, get_model
from fedsim_jax.models.zoo import (
  MLP,
  VGG11,
  AlexNet,
  CharLSTM,
  EmnistCNN,
  FedASMUCNN,
  FedAvgCNN,
  LeNet5,
  MnistCNN,
  ResNet,
  TextCNN,
  WordLSTM,
)

__all__ = [
  'Model',
  'Params',
  'identity_tokens',
  'scale_to_unit_interval',
  'AlexNet',
  'CharLSTM',
  'EmnistCNN',
  'FedASMUCNN',
  'FedAvgCNN',
  'LeNet5',
  'MLP',
  'MnistCNN',
  'MODELS',
  'ModelContext',
  'ResNet',
  'TextCNN',
  'VGG11',
  'WordLSTM',
  'build_model',
  'get_model',
]
