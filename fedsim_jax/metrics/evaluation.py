"""Centralised evaluation of the global model on a held-out split.

Besides accuracy and loss, `make_evaluator` can report, from the same single pass over the
split, accuracy on named class subsets (the "straggler accuracy" of Hard et al. 2024,
"Learning from straggler clients in federated learning", Sec. 5.1: accuracy on held-out
examples of the straggler classes), balanced accuracy (mean per-class recall; Brodersen et al.
2010, "The balanced accuracy and its posterior distribution") and top-k accuracy. All three
come from per-class counts (correct and total per true class) and top-k hit counts summed over
batches inside jit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.distributed import host_value
from fedsim_jax.executor.choice import jit
from fedsim_jax.models import Model, Params


def _check_class_metrics(
  model: Model, y: np.ndarray, class_groups: Mapping[str, Sequence[int]], top_k: Sequence[int]
) -> int:
  """Checks the class-metric settings against the labels; returns the number of classes."""
  if y.ndim != 1:
    raise ValueError(
      f'class_groups, balanced_accuracy and top_k need class labels of shape [N]; got labels '
      f'of shape {y.shape} (sequence outputs are not supported); allowed: classification data'
    )
  num_classes = int(model.num_classes)
  if y.size and (y.min() < 0 or y.max() >= num_classes):
    raise ValueError(
      f"test labels span {y.min()}..{y.max()}, outside the model's classes; "
      f'allowed: 0..{num_classes - 1}'
    )
  present = np.bincount(y, minlength=num_classes) > 0
  for name, classes in class_groups.items():
    members = np.asarray(classes)
    if (
      not isinstance(name, str)
      or not name
      or members.ndim != 1
      or members.size == 0
      or not np.issubdtype(members.dtype, np.integer)
      or members.min() < 0
      or members.max() >= num_classes
    ):
      raise ValueError(
        f'class_groups[{name!r}]={classes!r} is invalid; allowed: a non-empty name and a '
        f'non-empty list of classes in 0..{num_classes - 1}'
      )
    if not present[members].any():
      raise ValueError(
        f'class_groups[{name!r}]={classes!r} has no example in the evaluation split; '
        'allowed: groups with at least one test example'
      )
  for k in top_k:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= num_classes:
      raise ValueError(f'top_k={tuple(top_k)!r} is invalid; allowed: integers in 1..{num_classes}')
  return num_classes


def _on_one_device(params: Params) -> Params:
  """`params` with every array on one device. A server model replicated over several devices
  (that of an executor sharded over them) gives this process's first copy, so that evaluation
  runs once rather than the same pass on every device; an array split over devices is
  gathered."""

  def leaf_on_one_device(leaf: object) -> object:
    if not isinstance(leaf, jax.Array) or len(leaf.sharding.device_set) == 1:
      return leaf
    if leaf.sharding.is_fully_replicated:
      return leaf.addressable_shards[0].data
    return jnp.asarray(host_value(leaf))

  return jax.tree_util.tree_map(leaf_on_one_device, params)


def make_evaluator(
  model: Model,
  x: np.ndarray,
  y: np.ndarray,
  batch_size: int = 1000,
  *,
  class_groups: Mapping[str, Sequence[int]] | None = None,
  balanced_accuracy: bool = False,
  top_k: Sequence[int] = (),
) -> Callable[[Params], dict[str, float]]:
  """Returns `evaluate(params) -> {'accuracy', 'loss', 'num_examples', ...}` over `(x, y)`.

  The split is padded to whole batches (padding weighted 0) and kept on device; one jitted
  program is compiled per model, and runs on one device: a model replicated over several
  devices (a sharded executor's) is evaluated from one copy, which on XLA:CPU took a quarter of
  the time of the same program on 4 devices, with the same metrics. Batches run from a Python
  loop, which on XLA:CPU is faster for convolutions than a scan (docs/design-notes.md,
  "Backends"). `accuracy` and `loss` always come from `model.evaluate`, so they work for any
  model, sequence models included.

  Class metrics (classification models only: logits `[B, num_classes]`, labels `[N]`) are
  computed in the same jitted pass from `model.apply` (XLA shares the forward pass with
  `model.evaluate`), from per-class counts summed over batches:

  * `class_groups={'straggler': [0, 1, 2, 3, 4]}` adds `accuracy/straggler`: correct
    predictions among the test examples whose true class is in the group, divided by their
    number (micro-averaged over the group's examples).
  * `balanced_accuracy=True` adds `balanced_accuracy`: the mean over classes of the recall
    (correct / examples of that true class), over the classes present in the split (as
    scikit-learn's `balanced_accuracy_score`).
  * `top_k=(5,)` adds `top_5_accuracy`: the fraction of examples whose true class is among the
    k largest logits (`jax.lax.top_k`; ties go to the lower class index, as for argmax).

  Raises:
    ValueError: an empty split, or invalid class settings (labels not of shape [N] or outside
      0..num_classes-1, a group with an invalid class or no test example, k outside
      1..num_classes). A model whose logits are not `[B, num_classes]` raises on the first
      call when class metrics are requested.
  """
  if len(x) == 0:
    raise ValueError('evaluation split is empty')
  class_groups = dict(class_groups or {})
  top_k = tuple(top_k)
  if not isinstance(balanced_accuracy, (bool, np.bool_)):
    raise ValueError(f'balanced_accuracy={balanced_accuracy!r} is invalid; allowed: True, False')
  class_metrics = bool(class_groups) or bool(balanced_accuracy) or bool(top_k)
  y = np.asarray(y)
  num_classes = _check_class_metrics(model, y, class_groups, top_k) if class_metrics else 0

  batch_size = min(batch_size, len(x))
  num_batches = -(-len(x) // batch_size)
  padded = num_batches * batch_size
  weights = np.zeros(padded, np.float32)
  weights[: len(x)] = 1.0
  pad = padded - len(x)
  xs = jnp.asarray(
    np.concatenate([x, np.repeat(x[:1], pad, 0)]).reshape(num_batches, batch_size, *x.shape[1:])
  )
  ys = jnp.asarray(
    np.concatenate([y, np.repeat(y[:1], pad, 0)])
    .reshape(num_batches, batch_size, *y.shape[1:])
    .astype(np.int32)
  )
  ws = jnp.asarray(weights.reshape(num_batches, batch_size))

  def class_counts(params, xb, yb, wb):
    logits = model.apply(params, xb)
    if logits.shape != (xb.shape[0], num_classes):
      raise ValueError(
        f'class_groups, balanced_accuracy and top_k need logits of shape [B, {num_classes}]; '
        f'the model returns {logits.shape} (sequence outputs are not supported); '
        'allowed: classification models'
      )
    correct = (jnp.argmax(logits, axis=-1) == yb).astype(jnp.float32) * wb
    counts = {
      'class_correct': jnp.zeros(num_classes, jnp.float32).at[yb].add(correct),
      'class_count': jnp.zeros(num_classes, jnp.float32).at[yb].add(wb),
    }
    for k in top_k:
      _, top = jax.lax.top_k(logits, k)
      hit = jnp.any(top == yb[:, None], axis=-1).astype(jnp.float32)
      counts[f'top_{k}_correct'] = (hit * wb).sum()
    return counts

  @jit
  def batch_metrics(params, xb, yb, wb):
    counts = class_counts(params, xb, yb, wb) if class_metrics else {}  # checks shapes first
    return {**model.evaluate(params, xb, yb, wb), **counts}

  group_members = {name: np.unique(classes) for name, classes in class_groups.items()}

  def evaluate(params: Params) -> dict[str, float]:
    params = _on_one_device(params)
    totals = None
    for i in range(num_batches):
      m = batch_metrics(params, xs[i], ys[i], ws[i])
      totals = m if totals is None else jax.tree_util.tree_map(jnp.add, totals, m)
    totals = jax.device_get(totals)
    count = float(totals['count'])
    result = {
      'accuracy': float(totals['correct']) / count,
      'loss': float(totals['loss_sum']) / count,
      'num_examples': int(count),
    }
    if not class_metrics:
      return result
    class_correct = np.asarray(totals['class_correct'], np.float64)
    class_count = np.asarray(totals['class_count'], np.float64)
    for name, members in group_members.items():
      result[f'accuracy/{name}'] = float(class_correct[members].sum() / class_count[members].sum())
    if balanced_accuracy:
      present = class_count > 0
      result['balanced_accuracy'] = float(np.mean(class_correct[present] / class_count[present]))
    for k in top_k:
      result[f'top_{k}_accuracy'] = float(totals[f'top_{k}_correct']) / count
    return result

  return evaluate
