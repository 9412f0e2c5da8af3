"""The `Model` bundle: a flax module plus the loss and metrics the simulator needs.

Every layer above `models` (client updates, evaluation) talks to a model only through this
bundle, so a user can plug in any flax module by wrapping it with `Model`.

Two extensions of the plain image classifier:

* Token sequences. `input_dtype=jnp.int32` with `preprocess=identity_tokens` feeds integer
  token ids to the module unscaled. Labels may be `[B, T]` (one next-token label per position,
  logits `[B, T, V]`): the loss is then the per-token cross-entropy averaged over counted tokens,
  each example's weight broadcast over its positions and positions labelled `pad_id` excluded
  from loss and accuracy (the masked next-token loss of the TFF/Reddi et al. 2021 Shakespeare and
  StackOverflow tasks). `evaluate` then counts tokens, not examples.
* Mutable state (BatchNorm). A module with non-trainable collections (`state_collections`, e.g.
  `('batch_stats',)`) carries them inside the parameter pytree:
  `params = {'params': trainable, 'batch_stats': running_stats}`, so everything that moves,
  averages or subtracts models (deltas, aggregation, staleness blends) handles the statistics
  like weights. The rule for federated training (the one of FedAvg reference codebases, which
  average every model buffer; FedCompass's code averages buffers the same way):
    - a local step normalises with the statistics of its mini-batch (train mode, zero-weight
      padding slots masked out) and replaces the running statistics by their updated
      exponential averages; the optimizer sees only `params['params']`, so statistics get no
      gradient, momentum or weight decay (`Model.split` / `Model.merge`);
    - `apply`, `loss` and `evaluate` use the running statistics (eval mode, deterministic);
    - the server aggregates the statistics' deltas with the same weights as the weights' deltas,
      i.e. the new global statistics are the weighted average of the clients' statistics (exactly
      so under FedAvg's server rule; a server optimizer with momentum/adaptivity acts on them too).
  The alternative, FedBN (Li et al. 2021: normalisation layers stay local and are never
  aggregated), is not implemented. Modules with state must accept `train: bool` and
  `mask: [B] bool | None` keyword arguments (`mask` marks the examples whose statistics count).
  Models without state (`has_state` False) take exactly the params-only code path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast, overload

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

Params = Any  # a pytree of arrays
Preprocess = Callable[[jax.Array], jax.Array]


def scale_to_unit_interval(x: jax.Array) -> jax.Array:
  """Maps integer pixels (uint8, 0..255) to float32 in [0, 1]; floats pass through."""
  if jnp.issubdtype(x.dtype, jnp.integer):
    return x.astype(jnp.float32) * (1.0 / 255.0)
  return x.astype(jnp.float32)


def identity_tokens(x: jax.Array) -> jax.Array:
  """Integer token ids passed through unscaled (as int32) for embedding layers."""
  return x.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Model:
  """A classifier: a flax module with its input shape, preprocessing, loss and metrics.

  Attributes:
    name: registry name, recorded in run outputs.
    module: flax linen module mapping a batch `[B, *input_shape]` to logits `[B, num_classes]`
      (or `[B, T, num_classes]` for per-position prediction).
    input_shape: shape of one example as stored in the dataset (e.g. `(28, 28, 1)`).
    num_classes: number of output classes (the vocabulary size for next-token models).
    preprocess: applied to raw stored inputs inside jit before the module (default scales
      uint8 images to [0, 1]; `identity_tokens` for token ids).
    input_dtype: dtype of the dummy input used by `init` (int32 for token models).
    pad_id: label id excluded from loss and accuracy (padding tokens); None counts every label.
    state_collections: non-trainable variable collections carried in the params pytree
      (e.g. `('batch_stats',)`); empty for params-only models.
  """

  name: str
  module: nn.Module
  input_shape: tuple[int, ...]
  num_classes: int
  preprocess: Preprocess = scale_to_unit_interval
  input_dtype: Any = jnp.float32
  pad_id: int | None = None
  state_collections: tuple[str, ...] = ()

  @property
  def has_state(self) -> bool:
    """Whether params are `{'params': ..., <state collection>: ...}` (e.g. BatchNorm)."""
    return bool(self.state_collections)

  def init(self, key: jax.Array) -> Params:
    """Returns freshly initialised parameters (with the running state when `has_state`)."""
    dummy = jnp.zeros((1, *self.input_shape), self.input_dtype)
    variables = self.module.init(key, dummy)
    if not self.has_state:
      extra = sorted(set(variables) - {'params'})
      if extra:
        raise ValueError(
          f'Model.state_collections=() but model {self.name!r} has variable '
          f'collections {extra}; allowed: state_collections listing them'
        )
      return variables['params']
    return {'params': variables['params'], **{c: variables[c] for c in self.state_collections}}

  def split(self, params: Params) -> tuple[Params, Params]:
    """`(trainable, state)`: what the optimizer updates and what it must not touch."""
    if not self.has_state:
      return params, {}
    return params['params'], {c: params[c] for c in self.state_collections}

  def merge(self, trainable: Params, state: Params) -> Params:
    """Inverse of `split`."""
    if not self.has_state:
      return trainable
    return {'params': trainable, **state}

  def apply(self, params: Params, x: jax.Array) -> jax.Array:
    """Logits for raw inputs `x` `[B, *input_shape]` (running statistics when `has_state`)."""
    # Without `mutable`, flax's `apply` returns the module's output alone (its declared return
    # type also covers the `(output, state)` pair of mutable calls).
    if not self.has_state:
      return cast(jax.Array, self.module.apply({'params': params}, self.preprocess(x)))
    return cast(jax.Array, self.module.apply(params, self.preprocess(x), train=False))

  def apply_train(
    self, params: Params, x: jax.Array, weights: jax.Array | None = None
  ) -> tuple[jax.Array, Params]:
    """Training-mode logits and the updated state (`{}` for params-only models).

    Batch statistics are computed over the examples with weight > 0 (all of them when no
    example has weight, in which case the state is returned unchanged).
    """
    if not self.has_state:
      return self.apply(params, x), {}
    mask = None
    if weights is not None:
      any_real = weights.sum() > 0
      mask = (weights > 0) | ~any_real
    logits, new_state = self.module.apply(
      params, self.preprocess(x), train=True, mask=mask, mutable=list(self.state_collections)
    )
    _, old_state = self.split(params)
    new_state = {c: new_state[c] for c in self.state_collections}
    if weights is not None:
      new_state = jax.tree_util.tree_map(
        lambda n, o: jnp.where(any_real, n, o), new_state, old_state
      )
    return logits, new_state

  def capture_features(
    self, forward: Callable[..., Any], *args: Any, **kwargs: Any
  ) -> tuple[Any, jax.Array]:
    """`(forward(*args, **kwargs), features)`: runs a forward pass of this model (`apply`,
    `apply_train`, ...) and also returns the penultimate representation, i.e. the input of the
    output layer: the last `nn.Dense` the module calls (`[B, F]`; `[B, T, F]` for per-position
    models). Used by objectives on representations (MOON's contrastive loss); works under jit,
    vmap and grad (a flax method interceptor, no change to the modules).

    Raises:
      ValueError: if the module calls no `nn.Dense`.
    """
    captured = []

    def interceptor(next_fun, call_args, call_kwargs, context):
      if isinstance(context.module, nn.Dense) and context.method_name == '__call__':
        captured.append(call_args[0])
      return next_fun(*call_args, **call_kwargs)

    with nn.intercept_methods(interceptor):
      output = forward(*args, **kwargs)
    if not captured:
      raise ValueError(f'model {self.name!r} has no nn.Dense output layer; features need one')
    return output, captured[-1]

  def features(self, params: Params, x: jax.Array) -> jax.Array:
    """Penultimate representation of raw inputs `x` (eval mode), see `capture_features`."""
    return self.capture_features(self.apply, params, x)[1]

  @overload
  def label_weights(self, y: jax.Array, weights: jax.Array) -> jax.Array: ...

  @overload
  def label_weights(self, y: jax.Array, weights: jax.Array | None) -> jax.Array | None: ...

  def label_weights(self, y: jax.Array, weights: jax.Array | None) -> jax.Array | None:
    """Weights with the shape of `y`: example weights broadcast over positions, `pad_id`
    labels zeroed. Image labels `[B]` without `pad_id` get `weights` back unchanged."""
    if y.ndim == 1 and self.pad_id is None:
      return weights
    w = jnp.ones(y.shape[:1], jnp.float32) if weights is None else weights
    w = jnp.broadcast_to(w.reshape(w.shape + (1,) * (y.ndim - 1)), y.shape)
    if self.pad_id is not None:
      w = w * (y != self.pad_id)
    return w

  def cross_entropy(
    self, logits: jax.Array, y: jax.Array, weights: jax.Array | None = None
  ) -> jax.Array:
    """Weighted mean softmax cross-entropy over counted labels (examples or tokens)."""
    per_label = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    w = self.label_weights(y, weights)
    if w is None:
      return per_label.mean()
    return (per_label * w).sum() / jnp.maximum(w.sum(), 1.0)

  def loss(
    self, params: Params, x: jax.Array, y: jax.Array, weights: jax.Array | None = None
  ) -> jax.Array:
    """Weighted mean softmax cross-entropy; zero-weight examples (padding) do not count."""
    return self.cross_entropy(self.apply(params, x), y, weights)

  def train_loss(
    self, params: Params, x: jax.Array, y: jax.Array, weights: jax.Array | None = None
  ) -> tuple[jax.Array, Params]:
    """`(loss, new_state)` in training mode (batch statistics); see `apply_train`."""
    logits, new_state = self.apply_train(params, x, weights)
    return self.cross_entropy(logits, y, weights), new_state

  def evaluate(
    self, params: Params, x: jax.Array, y: jax.Array, weights: jax.Array
  ) -> Mapping[str, jax.Array]:
    """Summed metrics over a padded batch: `loss_sum`, `correct`, `count` (all scalars).

    For per-position labels `count` is the number of counted (non-pad) tokens.
    """
    logits = self.apply(params, x)
    per_label = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    w = self.label_weights(y, weights)
    return {
      'loss_sum': (per_label * w).sum(),
      'correct': (correct * w).sum(),
      'count': w.sum(),
    }

  def num_params(self, params: Params, trainable_only: bool = False) -> int:
    """Number of scalars in `params` (all of them are communicated), or only the trainable
    ones (the figure papers quote, which excludes BatchNorm running statistics)."""
    if trainable_only:
      params = self.split(params)[0]
    return sum(int(p.size) for p in jax.tree_util.tree_leaves(params))
