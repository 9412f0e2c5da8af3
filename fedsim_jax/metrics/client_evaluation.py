"""Per-client (federated) evaluation: the evaluated model on each client's own test data, and,
optionally, each client's fine-tuned (personalized) model.

`ClientEvaluator(params, version)` evaluates every client with test data (or a fresh uniform
sample of `sample_size` of them, drawn from the version and the run's seed, so a resumed run
draws the same clients) and returns a `ClientEvaluation`: per-client accuracy, loss and
examples, and the distribution figures written in each metrics row (`ClientEvaluation.row`):

* `client_accuracy_mean` (over clients), `client_accuracy_weighted` (over examples: the
  accuracy on the union of the clients' test sets), `client_accuracy_std` (population std over
  clients), `client_accuracy_p10` (10th percentile, linear interpolation), `client_accuracy_min`
  (the worst client), `client_loss_mean`, `clients_evaluated`;
* `client_accuracy_mean/<group>` for each named group of clients (stragglers and standard
  clients of a straggler-domain split; fast, medium and slow thirds by expected step time);
* with personalization (k > 0 fine-tuning steps), the same figures as `personalized_*`.

The global model's pass is one pass over the evaluated clients' examples: per-example metrics
(`model.evaluate` on each example, vmapped) summed per client with `segment_sum` over the
batch's own clients (consecutive, at most a batch's worth) and added to their slots of the
totals, inside one jitted program per batch shape: linear in the examples, so evaluating 1,000
or 100,000 clients costs about what one central evaluation of as many examples does. Personalized evaluation trains each evaluated client
(`run_local_training`, plain SGD on its training data) and evaluates the result on its own test
examples, a chunk of clients at a time under `vmap`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.client.local_update import ClientUpdate
from fedsim_jax.client.runner import run_local_training
from fedsim_jax.data.client_test import ClientTestSet
from fedsim_jax.data.federated import ClientDataArrays
from fedsim_jax.metrics.evaluation import _on_one_device
from fedsim_jax.models import Model, Params

# The sample of evaluated clients' and the fine-tuning keys' own streams of the run's seed.
_SAMPLE_STREAM = 0x6576616C  # 'eval'
_FINE_TUNE_STREAM = 0x74756E65  # 'tune'
PERSONALIZATION_CHUNK = 16  # clients fine-tuned (or evaluated on their own models) together

# `(params, clients) -> stacked models [len(clients), ...]`: each client's own model that the
# algorithm keeps (its scheduler's `personal_models_of`), given the evaluated global model.
PersonalModels = Callable[[Params, np.ndarray], Params]


@dataclasses.dataclass(frozen=True)
class Personalization:
  """Fine-tuning before evaluation: `steps` local steps of `client_update` on `data`."""

  steps: int
  client_update: ClientUpdate
  data: ClientDataArrays
  sampling: str = 'shuffle'


def distribution(
  accuracy: np.ndarray, weights: np.ndarray, prefix: str = 'client_accuracy'
) -> dict[str, float]:
  """Mean, example-weighted mean, std, 10th percentile and minimum of per-client accuracies
  (`weights`: each client's test examples)."""
  accuracy = np.asarray(accuracy, np.float64)
  weights = np.asarray(weights, np.float64)
  return {
    f'{prefix}_mean': float(accuracy.mean()),
    f'{prefix}_weighted': float((accuracy * weights).sum() / weights.sum()),
    f'{prefix}_std': float(accuracy.std()),
    f'{prefix}_p10': float(np.percentile(accuracy, 10)),
    f'{prefix}_min': float(accuracy.min()),
  }


@dataclasses.dataclass(frozen=True)
class ClientEvaluation:
  """One per-client evaluation.

  Attributes:
    clients: `[G]` ids of the evaluated clients (ascending).
    accuracy, loss: `[G]` the evaluated model on each client's test examples.
    num_examples: `[G]` test examples (tokens, for sequence models) per client.
    personalized_accuracy: `[G]` after fine-tuning, or None without personalization.
    personal_model_accuracy: `[G]` each client's own model kept by the algorithm (Ditto's v_k,
      FedBN's local normalisation), or None for algorithms that keep none.
    groups: name -> `[num_clients]` bool membership, for per-group means.
  """

  clients: np.ndarray
  accuracy: np.ndarray
  loss: np.ndarray
  num_examples: np.ndarray
  personalized_accuracy: np.ndarray | None = None
  personal_model_accuracy: np.ndarray | None = None
  groups: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

  def row(self) -> dict[str, float]:
    """The distribution figures of a metrics row (see the module's docstring)."""
    row = distribution(self.accuracy, self.num_examples)
    row['client_loss_mean'] = float(np.mean(self.loss))
    row['clients_evaluated'] = len(self.clients)
    figures = [('client_accuracy', self.accuracy)]
    for prefix in ('personalized_accuracy', 'personal_model_accuracy'):
      values = getattr(self, prefix)
      if values is not None:
        row.update(distribution(values, self.num_examples, prefix))
        figures.append((prefix, values))
    for name, members in self.groups.items():
      chosen = members[self.clients]
      for prefix, values in figures:
        if chosen.any():
          row[f'{prefix}_mean/{name}'] = float(values[chosen].mean())
    return row

  def record(self, version: int, virtual_time: float) -> dict:
    """The per-client values, one line of `clients_eval.jsonl`."""
    record = {
      'version': version,
      'virtual_time': virtual_time,
      'clients': self.clients.tolist(),
      'accuracy': [round(float(a), 6) for a in self.accuracy],
      'loss': [round(float(v), 6) for v in self.loss],
      'num_examples': self.num_examples.astype(int).tolist(),
    }
    for name in ('personalized_accuracy', 'personal_model_accuracy'):
      values = getattr(self, name)
      if values is not None:
        record[name] = [round(float(a), 6) for a in values]
    return record


def _padded(array: np.ndarray, length: int) -> np.ndarray:
  pad = length - len(array)
  if pad == 0:
    return array
  return np.concatenate([array, np.repeat(array[:1], pad, 0)])


def _local_owners(owner: np.ndarray, num_batches: int, size: int) -> tuple[np.ndarray, jax.Array]:
  """Each batch's first evaluated client (`[num_batches]`) and its rows' clients counted from
  it (`[num_batches, size]`; padding rows `size`, a segment that `segment_sum` drops)."""
  flat = np.zeros(num_batches * size, np.int32)
  flat[: len(owner)] = owner
  # A batch's first row is real: padding ends the last batch only.
  firsts = flat[::size].copy()
  local = flat - np.repeat(firsts, size)
  local[len(owner) :] = size
  return firsts, jnp.asarray(local.reshape(num_batches, size))


def _bucket(n: int) -> int:
  """`n` rounded up to a power of two (so few example counts compile)."""
  return 1 << max(int(n) - 1, 0).bit_length()


class ClientEvaluator:
  """Evaluates a model on every client's own test data (module docstring).

  Args:
    model: the model.
    test: the clients' test examples.
    batch_size: examples per evaluation batch.
    groups: name -> `[num_clients]` bool membership, reported as per-group means.
    sample_size: clients per evaluation (a fresh uniform sample); None: every client with test
      examples.
    seed: the run's seed (the sample and the fine-tuning keys).
    personalization: fine-tune each evaluated client before a second evaluation.
  """

  def __init__(
    self,
    model: Model,
    test: ClientTestSet,
    batch_size: int = 1000,
    *,
    groups: Mapping[str, np.ndarray] | None = None,
    sample_size: int | None = None,
    seed: int = 0,
    personalization: Personalization | None = None,
  ) -> None:
    self.model = model
    self.test = test
    self.groups = {name: np.asarray(m, bool) for name, m in (groups or {}).items()}
    self.eligible = np.flatnonzero(test.sizes > 0)
    if len(self.eligible) == 0:
      raise ValueError('no client has test examples')
    if sample_size is not None and sample_size > len(self.eligible):
      raise ValueError(
        f'eval_clients={sample_size} is more than the {len(self.eligible)} clients with test '
        f'examples; allowed: 1..{len(self.eligible)} or None'
      )
    self.sample_size = sample_size
    self.seed = int(seed)
    self.personalization = personalization
    self.num_evaluated = len(self.eligible) if sample_size is None else sample_size
    self.batch_size = int(min(batch_size, max(int(test.sizes.sum()), 1)))
    self._all: tuple | None = None  # the batches of every eligible client, made once
    num_evaluated = self.num_evaluated

    def per_example(params, x, y, w):
      return jax.vmap(lambda xi, yi, wi: model.evaluate(params, xi[None], yi[None], wi[None]))(
        x, y, w
      )

    size = self.batch_size

    @functools.partial(jax.jit, donate_argnums=0)
    def add_batch(totals, params, x, y, w, first, local_owner):
      # A batch's rows belong to consecutive evaluated clients first, first + 1, ...: each sum
      # is over the batch's own (at most `size`) clients, added to their slots of the totals,
      # so a batch costs O(size) whatever the number of evaluated clients.
      metrics = per_example(params, x, y, w)
      out = {}
      for name, total in totals.items():
        sums = jax.ops.segment_sum(metrics[name], local_owner, num_segments=size)
        # Summed apart from the totals, then added: the order of a one-pass sum per batch.
        sums = jax.lax.optimization_barrier(sums)
        slots = jax.lax.dynamic_slice(total, (first,), (size,))
        out[name] = jax.lax.dynamic_update_slice(total, slots + sums, (first,))
      return out

    self._add_batch = add_batch
    # Totals have `size` slots past the last evaluated client, so a batch's slots always fit.
    self._num_slots = num_evaluated + size
    self._evaluate_each = jax.jit(jax.vmap(model.evaluate))
    if personalization is not None:
      self._tune_and_evaluate = jax.jit(self._personalized_program(personalization))

  def _personalized_program(self, p: Personalization):
    model = self.model

    def one(params, client_id, key, x, y, w):
      delta, _ = run_local_training(
        p.client_update,
        p.data,
        params,
        client_id,
        jnp.asarray(p.steps, jnp.int32),
        key,
        max_steps=p.steps,
        sampling=p.sampling,
      )
      tuned = jax.tree_util.tree_map(jnp.add, params, delta)
      return model.evaluate(tuned, x, y, w)

    def program(params, client_ids, keys, x, y, w):
      return jax.vmap(one, in_axes=(None, 0, 0, 0, 0, 0))(params, client_ids, keys, x, y, w)

    return program

  def clients(self, version: int) -> np.ndarray:
    """The clients evaluated at `version` (ascending)."""
    if self.sample_size is None:
      return self.eligible
    rng = np.random.default_rng([self.seed, _SAMPLE_STREAM, int(version)])
    return np.sort(rng.choice(self.eligible, self.sample_size, replace=False))

  def _batches(self, clients: np.ndarray) -> tuple:
    rows, owner = self.test.rows(clients)
    size = self.batch_size
    total = -(-len(rows) // size) * size
    weights = np.zeros(total, np.float32)
    weights[: len(rows)] = 1.0
    shape = (total // size, size)
    x = _padded(self.test.x[rows], total)
    y = _padded(self.test.y[rows], total)
    return (
      jnp.asarray(x.reshape(shape + x.shape[1:])),
      jnp.asarray(y.reshape(shape + y.shape[1:]).astype(np.int32)),
      jnp.asarray(weights.reshape(shape)),
      *_local_owners(owner, total // size, size),
    )

  def __call__(
    self, params: Params, version: int, personal_models: PersonalModels | None = None
  ) -> ClientEvaluation:
    params = _on_one_device(params)
    clients = self.clients(version)
    if self.sample_size is None:
      if self._all is None:
        self._all = self._batches(clients)
      xs, ys, ws, firsts, owners = self._all
    else:
      xs, ys, ws, firsts, owners = self._batches(clients)
    totals = {
      name: jnp.zeros(self._num_slots, jnp.float32) for name in ('correct', 'loss_sum', 'count')
    }
    for i in range(xs.shape[0]):
      totals = self._add_batch(totals, params, xs[i], ys[i], ws[i], firsts[i], owners[i])
    totals = {name: value[: len(clients)] for name, value in jax.device_get(totals).items()}
    count = np.asarray(totals['count'], np.float64)
    personalized = own = None
    if self.personalization is not None:
      base = jax.random.fold_in(jax.random.PRNGKey(self.seed ^ _FINE_TUNE_STREAM), version)

      def tune(ids, x, y, w):
        keys = jax.vmap(lambda c: jax.random.fold_in(base, c))(ids)
        return self._tune_and_evaluate(params, ids, keys, x, y, w)

      personalized = self._per_client(clients, tune)
    if personal_models is not None:

      def own_models(ids, x, y, w):
        return self._evaluate_each(personal_models(params, np.asarray(ids)), x, y, w)

      own = self._per_client(clients, own_models)
    return ClientEvaluation(
      clients=clients,
      accuracy=np.asarray(totals['correct'], np.float64) / count,
      loss=np.asarray(totals['loss_sum'], np.float64) / count,
      num_examples=count,
      personalized_accuracy=personalized,
      personal_model_accuracy=own,
      groups=self.groups,
    )

  def _per_client(self, clients: np.ndarray, run: Callable[..., Any]) -> np.ndarray:
    """Accuracy of each of `clients` under its own model: `run(ids, x, y, w)` evaluates a chunk
    of clients of similar test size (their examples padded to a power of two, `[chunk, L]`)."""
    sizes = self.test.sizes[clients]
    order = np.argsort(sizes, kind='stable')
    accuracy = np.zeros(len(clients))
    for start in range(0, len(clients), PERSONALIZATION_CHUNK):
      chosen = order[start : start + PERSONALIZATION_CHUNK]
      ids = clients[chosen]
      length = _bucket(sizes[chosen].max())
      padding = PERSONALIZATION_CHUNK - len(ids)  # the last chunk: one compiled shape
      all_ids = np.concatenate([ids, np.repeat(ids[:1], padding)]).astype(np.int32)
      x, y, w = [], [], []
      for client in all_ids:
        rows = np.arange(self.test.offsets[client], self.test.offsets[client + 1])
        weights = np.zeros(length, np.float32)
        weights[: len(rows)] = 1.0
        x.append(_padded(self.test.x[rows], length))
        y.append(_padded(self.test.y[rows], length))
        w.append(weights)
      metrics = jax.device_get(
        run(
          jnp.asarray(all_ids),
          jnp.asarray(np.stack(x)),
          jnp.asarray(np.stack(y).astype(np.int32)),
          jnp.asarray(np.stack(w)),
        )
      )
      correct = np.asarray(metrics['correct'][: len(ids)], np.float64)
      accuracy[chosen] = correct / np.asarray(metrics['count'][: len(ids)], np.float64)
    return accuracy


def speed_groups(expected_step_times: np.ndarray) -> dict[str, np.ndarray]:
  """Fast, medium and slow thirds of the clients by expected seconds per step (ties by id)."""
  times = np.asarray(expected_step_times, np.float64)
  order = np.lexsort((np.arange(len(times)), times))
  rank = np.empty(len(times), np.int64)
  rank[order] = np.arange(len(times))
  third = np.minimum(rank * 3 // max(len(times), 1), 2)
  if np.ptp(times) == 0:
    return {}  # every client equally fast: no speed groups
  return {name: third == i for i, name in enumerate(('fast', 'medium', 'slow'))}
