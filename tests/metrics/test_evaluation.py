"""Evaluation groups: class-subset, balanced and top-k accuracy from one pass."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.metrics import make_evaluator
from fedsim_jax.models import Model, get_model


class _Identity(nn.Module):
  """Returns its input: the test inputs are the logits themselves."""

  @nn.compact
  def __call__(self, x):
    return x


class _Repeat(nn.Module):
  """Sequence-shaped logits [B, T, V] from inputs [B, V]."""

  length: int = 3

  @nn.compact
  def __call__(self, x):
    return jnp.repeat(x[:, None, :], self.length, axis=1)


def _logit_model(num_classes: int, module: nn.Module | None = None) -> Model:
  return Model(
    name='fixed_logits',
    module=module or _Identity(),
    input_shape=(num_classes,),
    num_classes=num_classes,
    preprocess=lambda x: x.astype(jnp.float32),
  )


# Hand-computable case: 4 classes, 7 examples; `x` rows are the logits.
LOGITS = np.array(
  [
    [5, 1, 0, 0],  # y=0: top-1 right
    [1, 5, 0, 0],  # y=0: wrong (1), top-2 right
    [0, 3, 2, 0],  # y=1: right
    [4, 3, 2, 1],  # y=2: wrong (0), top-2 {0, 1} wrong, top-3 right
    [0, 0, 0, 9],  # y=3: right
    [1, 2, 3, 0],  # y=3: wrong (2), top-3 {2, 1, 0} wrong
    [0, 4, 0, 0],  # y=1: right
  ],
  np.float32,
)
LABELS = np.array([0, 0, 1, 2, 3, 3, 1])


@pytest.mark.parametrize('batch_size', [1, 3, 7, 1000])  # padded and unpadded batches
def test_hand_computed_metrics(batch_size: int) -> None:
  model = _logit_model(4)
  evaluate = make_evaluator(
    model,
    LOGITS,
    LABELS,
    batch_size,
    class_groups={'straggler': [0, 1], 'rest': [2, 3]},
    balanced_accuracy=True,
    top_k=(1, 2, 3),
  )
  metrics = evaluate({})
  expected_loss = float(
    optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(LOGITS), jnp.asarray(LABELS)).mean()
  )
  assert metrics['num_examples'] == 7
  assert metrics['accuracy'] == pytest.approx(4 / 7)
  assert metrics['loss'] == pytest.approx(expected_loss, rel=1e-6)
  assert metrics['accuracy/straggler'] == pytest.approx(3 / 4)  # classes 0, 1: 1/2 + 2/2
  assert metrics['accuracy/rest'] == pytest.approx(1 / 3)  # classes 2, 3: 0/1 + 1/2
  # Per-class recall 1/2, 2/2, 0/1, 1/2.
  assert metrics['balanced_accuracy'] == pytest.approx((0.5 + 1.0 + 0.0 + 0.5) / 4)
  assert metrics['top_1_accuracy'] == pytest.approx(4 / 7)
  assert metrics['top_2_accuracy'] == pytest.approx(5 / 7)
  assert metrics['top_3_accuracy'] == pytest.approx(6 / 7)


def test_plain_outputs_unchanged() -> None:
  model = _logit_model(4)
  plain = make_evaluator(model, LOGITS, LABELS, 3)({})
  assert set(plain) == {'accuracy', 'loss', 'num_examples'}
  grouped = make_evaluator(model, LOGITS, LABELS, 3, class_groups={'all': [0, 1, 2, 3]})({})
  for key in plain:
    assert grouped[key] == plain[key]
  assert grouped['accuracy/all'] == pytest.approx(plain['accuracy'])


def test_balanced_accuracy_skips_classes_absent_from_the_split() -> None:
  model = _logit_model(6)  # classes 4 and 5 have no test example
  logits = np.pad(LOGITS, ((0, 0), (0, 2)), constant_values=-10)
  metrics = make_evaluator(model, logits, LABELS, balanced_accuracy=True)({})
  assert metrics['balanced_accuracy'] == pytest.approx(0.5)


def test_trained_linear_model_matches_numpy() -> None:
  rng = np.random.default_rng(0)
  x = rng.integers(0, 255, (103, 4, 4, 1)).astype(np.uint8)
  y = rng.integers(0, 5, 103)
  model = get_model('mlp', (4, 4, 1), 5, hidden_sizes=())
  params = model.init(jax.random.PRNGKey(1))
  metrics = make_evaluator(
    model, x, y, 16, class_groups={'low': [0, 1]}, balanced_accuracy=True, top_k=(2,)
  )(params)
  logits = np.asarray(model.apply(params, jnp.asarray(x)))
  right = logits.argmax(-1) == y
  recall = [right[y == c].mean() for c in range(5)]
  top2 = (np.argsort(-logits, axis=-1, kind='stable')[:, :2] == y[:, None]).any(-1)
  assert metrics['accuracy'] == pytest.approx(right.mean())
  assert metrics['accuracy/low'] == pytest.approx(right[y < 2].mean())
  assert metrics['balanced_accuracy'] == pytest.approx(np.mean(recall))
  assert metrics['top_2_accuracy'] == pytest.approx(top2.mean())


@dataclasses.dataclass(frozen=True)
class _SequenceModel(Model):
  """Logits [B, T, V] against labels [B, T]; evaluate counts tokens."""

  def evaluate(self, params, x, y, weights):
    logits = self.apply(params, x)
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    w = jnp.broadcast_to(weights[:, None], y.shape)
    return {
      'loss_sum': (per_token * w).sum(),
      'correct': ((jnp.argmax(logits, -1) == y) * w).sum(),
      'count': w.sum(),
    }


def test_sequence_outputs_keep_plain_metrics_and_reject_class_metrics() -> None:
  model = _SequenceModel(
    name='seq',
    module=_Repeat(),
    input_shape=(4,),
    num_classes=4,
    preprocess=lambda x: x.astype(jnp.float32),
  )
  token_labels = np.repeat(LABELS[:, None], 3, axis=1)  # [N, T]
  metrics = make_evaluator(model, LOGITS, token_labels, 3)({})
  assert metrics['num_examples'] == 21 and metrics['accuracy'] == pytest.approx(4 / 7)
  with pytest.raises(ValueError, match='sequence outputs are not supported'):
    make_evaluator(model, LOGITS, token_labels, class_groups={'s': [0]})
  # Labels [N] but logits [B, T, V]: refused at the first call, before model.evaluate runs.
  evaluate = make_evaluator(model, LOGITS, LABELS, top_k=(2,))
  with pytest.raises(ValueError, match='sequence outputs are not supported'):
    evaluate({})


@pytest.mark.parametrize(
  ('kwargs', 'setting'),
  [
    ({'class_groups': {'s': []}}, 'class_groups'),
    ({'class_groups': {'s': [7]}}, 'class_groups'),
    ({'class_groups': {'': [1]}}, 'class_groups'),
    ({'class_groups': {'s': [0.5]}}, 'class_groups'),
    ({'top_k': (0,)}, 'top_k'),
    ({'top_k': (5,)}, 'top_k'),
    ({'balanced_accuracy': 'yes'}, 'balanced_accuracy'),
  ],
)
def test_invalid_settings_raise_one_line(kwargs, setting: str) -> None:
  with pytest.raises(ValueError) as info:
    make_evaluator(_logit_model(4), LOGITS, LABELS, **kwargs)
  message = str(info.value)
  assert setting in message and 'allowed' in message and '\n' not in message


def test_group_without_test_examples_raises() -> None:
  with pytest.raises(ValueError, match="class_groups\\['none'\\].*no example"):
    make_evaluator(
      _logit_model(6), np.zeros((7, 6), np.float32), LABELS, class_groups={'none': [4, 5]}
    )
