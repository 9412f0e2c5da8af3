"""Models: flax modules wrapped in a `Model` bundle (init, apply, loss, eval metrics)."""

from fedsim_jax.models.bundle import Model, Params, identity_tokens, scale_to_unit_interval
from fedsim_jax.models.zoo import (
  MLP,
  MODELS,
  NEXT_TOKEN_MODELS,
  TOKEN_MODELS,
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
  get_model,
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
  'NEXT_TOKEN_MODELS',
  'ResNet',
  'TextCNN',
  'TOKEN_MODELS',
  'VGG11',
  'WordLSTM',
  'get_model',
]
