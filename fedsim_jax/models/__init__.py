"""Models: flax modules wrapped in a `Model` bundle (init, apply, loss, eval metrics)."""

from fedsim_jax.models.bundle import Model, Params, scale_to_unit_interval
from fedsim_jax.models.zoo import LeNet5, MLP, MnistCNN, MODELS, get_model

__all__ = ['Model', 'Params', 'scale_to_unit_interval', 'LeNet5', 'MLP', 'MnistCNN', 'MODELS',
           'get_model']
