"""FedASMU's fetch timing: after which local epoch a device requests the fresh global model.

Liu et al., "FedASMU: Efficient Asynchronous Federated Learning with Dynamic Staleness-aware
Model Update" (AAAI 2024): Sec. 4 "Intelligent Time Slot Selection", Formulas 5 and 6,
Algorithm 2 (lines 1 and 12-14), and the appendix ablation "Request Time Slot Selection" (H1-H3).

A device trains `num_epochs` local epochs (the paper's 𝓛^i) and requests the fresh global model
once, after epoch l* in 1..num_epochs-1 (Alg. 2 lines 4-6; a model fetched after the last epoch
could not be used). The FedASMU scheduler asks a `FetchPolicy` for l* when it dispatches a task
(`propose`) and reports the reward R = loss before minus loss after the blend (Alg. 2 line 12,
the mini-batch losses around Formula 7) when the device blends a newer model (`observe`). When
the server had nothing newer (g <= o, Alg. 2 line 8) there is no reward and no `observe` call.

Policies:
- `FixedFetch(fraction)`: l* = 1 + round(fraction (num_epochs - 2)), a fixed point of the valid
  range 1..num_epochs-1. The ablation's presets (`FIXED_FETCH_PRESETS`): H1 = 0 ("just after
  the first local epoch"), H2 = 1/2 ("in the middle of the local training": num_epochs / 2,
  rounded up), H3 = 1 ("at the last but one local epoch").
- `LearnedFetch`: the paper's selector.
  * A meta model θ on the server, shared by all devices: an LSTM with one dense layer. It gives a
    device's l* until the device's first local aggregation ("generates an initial time slot
    decision for each device, and is updated when a device performs the first local
    training"); that aggregation's reward updates θ by REINFORCE (Formula 5).
  * Afterwards a Q-table 𝓗^i per device over the actions {add, stay, minus} (l* + 1, l*, l* - 1;
    the paper prints "stay" as l* + 1, a typo) in the state l*, started at the meta model's slot
    ("initialized with the initial time slot") and updated by Formula 6:
      𝓗(l*, a) <- 𝓗(l*, a) + φ (R + ψ max_a' 𝓗(l*, a') - 𝓗(l*, a)).
  * Both choose ε-greedily.
  * The moving baseline of Formula 5 follows Alg. 2 line 13, b <- (1 - ρ) b + ρ R, updated
    before θ (line 13 precedes line 14), so Formula 5 uses R - b with the new b.

The meta model as a decision process. Formula 5 sums log P(f_l | f_{(l-1):1}; θ) over epochs,
f_l = 1 meaning "request after epoch l". One request per training means every decision before
l* is 0 and none is taken after it, so conditioning on f_{(l-1):1} is conditioning on "no
request yet": the policy is a stopping time with hazards h_l = P(f_l = 1 | no request before l)
for l = 1..K, K = num_epochs - 1, and h_K = 1 (the request is due by the last but one epoch):
  P(l* = l) = h_l prod_{k<l} (1 - h_k),
and log P(l*) is Formula 5's sum over the decisions actually made. The LSTM reads one feature
vector per epoch l; its dense head gives the hazard logit. Sequences are padded to a power of
two so that a run with many different `num_epochs` compiles a few programs only.

Choices where the paper is silent, each the field `fetch_<name>` of `algorithm.kwargs`
(`FedasmuSettings`, fedsim_jax/algorithms/fedasmu/settings.py; defaults in brackets):
- `hidden_size` [35]: LSTM width; the paper's REINFORCE follows Zoph & Le (2017), whose
  controller LSTM had 35 hidden units. One LSTM layer, one dense layer (the paper's
  "LSTM-based network with a fully connected layer").
- `features` [progress, remaining, length]: the LSTM's input at epoch l of 𝓛 = num_epochs:
  l / 𝓛, 1 / (𝓛 - l) and 1 / 𝓛.
- `hazard_prior` ['uniform']: adds -log(K - l) to the hazard logit, so that a head output of 0
  proposes every slot with probability 1 / K. Without it ('none') an untrained stopping-time
  policy (h about 1/2) favours the first slots geometrically, and with one meta update per
  device and η_RL = 0.001 that bias would hardly wear off.
- `pretrain_history` [None] and `pretrain_passes` [1]: the paper pre-trains θ "with some
  historical data" it does not give. A history is an .npz of (num_epochs, fetch_epoch, reward)
  records, as `LearnedFetch.save_history` writes them; pre-training replays it through the
  baseline and Formula 5 `pretrain_passes` times. None: no pre-training.
- `learning_rate` [0.001]: η_RL, Tables 5-6 (the only stated value). Formula 5 is a plain
  gradient step, so no optimiser state.
- `baseline_decay` [0.05]: ρ; `baseline_init` [0.0]: b_0. `baseline_scope` ['all']: Alg. 2
  line 13 runs at every local aggregation, so every reward moves b ('all'); 'meta' moves it
  only with the rewards of meta-model proposals. One baseline is shared by all devices: a
  per-device b would have seen only the reward it is compared with when θ is updated (once per
  device).
- `epsilon` [0.1]: ε of the ε-greedy choice, for the meta model and the Q-tables alike. The
  exploring branch draws uniformly among the valid slots / actions.
- `meta_exploit` ['sample']: the meta model's greedy branch samples l* from P(l*; θ) (REINFORCE
  is an on-policy estimator, and with one shared θ the mode would give every device the same
  slot); 'mode' takes the most probable slot. Formula 5 uses the slot actually requested either
  way, evaluated at the θ current when the reward arrives (other devices may have updated it).
- `q_learning_rate` [0.1]: φ of Formula 6; `q_discount` [0.9]: ψ. `q_bootstrap` ['same']: the
  max in Formula 6 over the same state l* as printed; 'next' uses the state the action led to
  (Watkins' Q-learning). The max runs over the actions valid in that state. Q-values start at 0;
  ties in the greedy branch are broken uniformly at random.

Runtime rules (not settings): a device stays with the meta model until its first `observe`; a
Q-table action moves the device's state l* when it is proposed, so a training without a reward
leaves the state moved but the table unchanged; if `num_epochs` shrinks below a device's state,
the state becomes num_epochs - 1 before choosing. Randomness: a numpy Generator (ε draws, Q
choices) and a JAX key (θ's initialisation and sampling), both from the seed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Protocol, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.models import Params
from fedsim_jax.str_enum import StrEnum


class FetchChoice(StrEnum):
  """The fetch policy (`algorithm.kwargs.fetch_policy`): learned, a fixed slot, or none."""

  LEARNED = 'learned'
  H1 = 'h1'
  H2 = 'h2'
  H3 = 'h3'
  NONE = 'none'


class HazardPrior(StrEnum):
  """The untrained meta model's slots (`algorithm.kwargs.fetch_hazard_prior`)."""

  UNIFORM = 'uniform'
  NONE = 'none'


class MetaExploit(StrEnum):
  """The meta model's greedy branch (`algorithm.kwargs.fetch_meta_exploit`)."""

  SAMPLE = 'sample'
  MODE = 'mode'


class BaselineScope(StrEnum):
  """The rewards that move the baseline b (`algorithm.kwargs.fetch_baseline_scope`)."""

  ALL = 'all'
  META = 'meta'


class QBootstrap(StrEnum):
  """The state of Formula 6's max (`algorithm.kwargs.fetch_q_bootstrap`)."""

  SAME = 'same'
  NEXT = 'next'


FETCH_POLICIES = tuple(choice.value for choice in FetchChoice)
# The appendix ablation's heuristics as `FixedFetch` fractions of the range 1..num_epochs-1.
FIXED_FETCH_PRESETS = {'h1': 0.0, 'h2': 0.5, 'h3': 1.0}
ACTIONS = ('add', 'stay', 'minus')
ACTION_STEPS = (1, 0, -1)
META_FEATURES = ('progress', 'remaining', 'length')
HAZARD_PRIORS = tuple(prior.value for prior in HazardPrior)
META_EXPLOITS = tuple(exploit.value for exploit in MetaExploit)
BASELINE_SCOPES = tuple(scope.value for scope in BaselineScope)
Q_BOOTSTRAPS = tuple(bootstrap.value for bootstrap in QBootstrap)


class FetchPolicy(Protocol):
  """When a FedASMU device requests the fresh global model (Alg. 2 lines 1 and 14)."""

  def propose(self, client: int, num_epochs: int) -> int:
    """l*: the local epoch (1..num_epochs-1) after which the device requests the fresh model."""
    ...

  def observe(self, client: int, fetch_epoch: int, reward: float) -> None:
    """reward: mini-batch loss before minus after the blend at `fetch_epoch` (Alg. 2 line 12)."""
    ...


def _check_num_epochs(num_epochs: int) -> None:
  if (
    isinstance(num_epochs, bool) or not isinstance(num_epochs, (int, np.integer)) or num_epochs < 2
  ):
    raise ValueError(
      f'num_epochs={num_epochs!r} is invalid; allowed values: an integer >= 2 '
      '(the fetch follows an epoch in 1..num_epochs-1)'
    )


def _check_range(
  name: str,
  value: float,
  low: float,
  high: float,
  *,
  low_open: bool = False,
  high_open: bool = False,
) -> None:
  ok = (
    not isinstance(value, bool)
    and isinstance(value, (int, float))
    and (value > low if low_open else value >= low)
    and (value < high if high_open else value <= high)
  )
  if not ok:
    lo, hi = ('<' if low_open else '<='), ('<' if high_open else '<=')
    raise ValueError(f'{name}={value!r} is invalid; allowed values: {low} {lo} x {hi} {high}')


def fixed_fetch_epoch(fraction: float, num_epochs: int) -> int:
  """1 + round(fraction (num_epochs - 2)), halves rounded up: 1 at 0, num_epochs - 1 at 1."""
  return 1 + math.floor(fraction * (num_epochs - 2) + 0.5)


class FixedFetch:
  """A fixed request epoch (the ablation's H1/H2/H3); it does not learn from rewards."""

  def __init__(self, fraction: float):
    _check_range('FixedFetch fraction', fraction, 0.0, 1.0)
    self.fraction = float(fraction)

  @classmethod
  def preset(cls, name: str) -> FixedFetch:
    """'h1', 'h2' or 'h3' of the appendix ablation."""
    return cls(FIXED_FETCH_PRESETS[name])

  def propose(self, client: int, num_epochs: int) -> int:
    del client
    _check_num_epochs(num_epochs)
    return fixed_fetch_epoch(self.fraction, num_epochs)

  def observe(self, client: int, fetch_epoch: int, reward: float) -> None:
    del client, fetch_epoch, reward  # a heuristic has nothing to learn


class MetaModel(nn.Module):
  """θ: an LSTM over the epochs and a dense head giving each epoch's hazard logit."""

  hidden_size: int

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    """features [epochs, num_features] -> hazard logits [epochs]."""
    hidden = nn.RNN(nn.OptimizedLSTMCell(self.hidden_size))(features[None])
    return nn.Dense(1)(hidden)[0, :, 0]


@dataclasses.dataclass(frozen=True)
class MetaSpec:
  """The meta model's static shape: LSTM width, input features, hazard prior."""

  hidden_size: int = 35
  features: tuple[str, ...] = META_FEATURES
  hazard_prior: str = 'uniform'


def padded_length(num_epochs: int) -> int:
  """The power of two >= num_epochs - 1 (the slots) that sequences are padded to."""
  return 1 << (num_epochs - 2).bit_length()


def _epoch_features(names: tuple[str, ...], num_epochs: jax.Array, length: int) -> jax.Array:
  epoch = jnp.arange(1, length + 1, dtype=jnp.float32)
  total = jnp.asarray(num_epochs, jnp.float32)
  remaining = jnp.where(epoch < total, total - epoch, 1.0)  # padding beyond the slots: any value
  columns = {
    'progress': epoch / total,
    'remaining': 1.0 / remaining,
    'length': jnp.broadcast_to(1.0 / total, epoch.shape),
  }
  return jnp.stack([columns[name] for name in names], axis=-1)


def slot_log_probs(spec: MetaSpec, params: Params, num_epochs: jax.Array, length: int) -> jax.Array:
  """log P(l* = l; θ) for l = 1..length ([length]); -inf beyond the last slot num_epochs - 1."""
  logits = cast(
    jax.Array,
    MetaModel(spec.hidden_size).apply(params, _epoch_features(spec.features, num_epochs, length)),
  )  # no mutable collections: the output alone
  epoch = jnp.arange(1, length + 1)
  last = num_epochs - 1
  if spec.hazard_prior == HazardPrior.UNIFORM:
    # h_l = 1 / (K - l + 1) at a zero head output: the uniform distribution over 1..K.
    logits = logits - jnp.log(jnp.maximum(last - epoch, 1).astype(jnp.float32))
  request = jnp.where(epoch == last, 0.0, jax.nn.log_sigmoid(logits))  # h_K = 1
  wait = jnp.where(epoch < last, jax.nn.log_sigmoid(-logits), 0.0)
  waited = jnp.cumsum(wait) - wait  # sum_{k<l} log(1 - h_k)
  return jnp.where(epoch <= last, waited + request, -jnp.inf)


_slot_log_probs = jax.jit(slot_log_probs, static_argnames=('spec', 'length'))


@functools.partial(jax.jit, static_argnames=('spec', 'length', 'exploit'))
def _choose_slot(
  spec: MetaSpec,
  params: Params,
  key: jax.Array,
  draw: jax.Array,
  num_epochs: jax.Array,
  length: int,
  exploit: str,
) -> jax.Array:
  log_probs = slot_log_probs(spec, params, num_epochs, length)
  if exploit == MetaExploit.MODE:
    return jnp.argmax(log_probs) + 1
  return jax.random.categorical(jax.random.fold_in(key, draw), log_probs) + 1


def reinforce_update(
  spec: MetaSpec,
  params: Params,
  num_epochs: int,
  fetch_epoch: int,
  advantage: float,
  learning_rate: float,
) -> Params:
  """Formula 5: θ + η_RL (R - b) ∇_θ log P(l* = fetch_epoch; θ), the log-probability being the
  sum of log P(f_l | f_{(l-1):1}; θ) over the decisions made (no request before l*, one at l*).
  """
  return _reinforce_update(
    spec, params, num_epochs, fetch_epoch, advantage, learning_rate, padded_length(num_epochs)
  )


@functools.partial(jax.jit, static_argnames=('spec', 'length'))
def _reinforce_update(
  spec: MetaSpec, params: Params, num_epochs, fetch_epoch, advantage, learning_rate, length: int
) -> Params:
  grads = jax.grad(lambda p: slot_log_probs(spec, p, num_epochs, length)[fetch_epoch - 1])(params)
  return jax.tree_util.tree_map(lambda p, g: p + learning_rate * advantage * g, params, grads)


class QTable:
  """One device's 𝓗^i: the values of (add, stay, minus) in each state l* (Formula 6)."""

  def __init__(self, learning_rate: float, discount: float, bootstrap: str = 'same'):
    self.learning_rate = learning_rate
    self.discount = discount
    self.bootstrap = bootstrap
    self._rows: dict[int, np.ndarray] = {}

  def row(self, state: int) -> np.ndarray:
    """The live values [3] of (add, stay, minus) in `state` (zeros when first seen)."""
    if state not in self._rows:
      self._rows[state] = np.zeros(len(ACTIONS))
    return self._rows[state]

  @staticmethod
  def valid_actions(state: int, num_slots: int) -> np.ndarray:
    """[3] bool: the actions that keep l* in 1..num_slots."""
    return np.array([state + step in range(1, num_slots + 1) for step in ACTION_STEPS])

  def choose(self, state: int, num_slots: int, epsilon: float, rng: np.random.Generator) -> int:
    """ε-greedy action index: uniform among the valid actions with probability ε, else the
    best valid one (ties broken uniformly)."""
    valid = self.valid_actions(state, num_slots)
    if rng.random() < epsilon:
      return int(rng.choice(np.flatnonzero(valid)))
    values = np.where(valid, self.row(state), -np.inf)
    best = np.flatnonzero(values == values.max())
    return int(best[0]) if best.size == 1 else int(rng.choice(best))

  def update(
    self, state: int, action: int, reward: float, next_state: int, num_slots: int
  ) -> float:
    """Formula 6 for the action taken in `state`; returns the new 𝓗(state, action)."""
    target = state if self.bootstrap == QBootstrap.SAME else next_state
    valid = self.valid_actions(target, num_slots)
    best = float(np.max(self.row(target)[valid]))
    row = self.row(state)
    row[action] += self.learning_rate * (reward + self.discount * best - row[action])
    return float(row[action])


@dataclasses.dataclass(frozen=True)
class _Pending:
  num_epochs: int
  fetch_epoch: int
  from_meta: bool
  state: int = 0  # Q-table phase: the state the action was chosen in
  action: int = 1


HISTORY_KEYS = ('num_epochs', 'fetch_epoch', 'reward')


def load_fetch_history(path: str) -> dict[str, np.ndarray]:
  """Reads an .npz of fetch records (`LearnedFetch.save_history`) for pre-training θ."""
  with np.load(path) as data:
    missing = [key for key in HISTORY_KEYS if key not in data]
    if missing:
      raise ValueError(
        f'algorithm.kwargs.fetch_pretrain_history={path!r} lacks arrays {missing}; '
        f'allowed: an .npz with arrays {list(HISTORY_KEYS)}'
      )
    return {key: np.asarray(data[key]) for key in HISTORY_KEYS}


class LearnedFetch:
  """FedASMU's selector: the meta LSTM θ (Formula 5) for a device's first fetch, then the
  device's Q-table (Formula 6), both ε-greedy. Settings as in the module docstring: the
  `fetch_*` fields of `FedasmuSettings`, which checks them."""

  def __init__(
    self,
    num_clients: int,
    seed: int,
    *,
    hidden_size: int = 35,
    features: tuple[str, ...] = META_FEATURES,
    hazard_prior: str = 'uniform',
    learning_rate: float = 0.001,
    baseline_decay: float = 0.05,
    baseline_init: float = 0.0,
    baseline_scope: str = 'all',
    epsilon: float = 0.1,
    meta_exploit: str = 'sample',
    q_learning_rate: float = 0.1,
    q_discount: float = 0.9,
    q_bootstrap: str = 'same',
    pretrain_history: str | None = None,
    pretrain_passes: int = 1,
  ):
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
      raise ValueError(f'num_clients={num_clients!r} is invalid; allowed values: an integer >= 1')
    features = tuple(features)
    self.num_clients = num_clients
    self.spec = MetaSpec(hidden_size, features, hazard_prior)
    self.learning_rate = float(learning_rate)
    self.baseline_decay = float(baseline_decay)
    self.baseline_scope = baseline_scope
    self.epsilon = float(epsilon)
    self.meta_exploit = meta_exploit
    self._q_settings = (q_learning_rate, q_discount, q_bootstrap)
    self._rng = np.random.default_rng(seed)
    init_key, self._sample_key = jax.random.split(jax.random.PRNGKey(seed))
    self.params: Params = MetaModel(hidden_size).init(init_key, jnp.zeros((1, len(features))))
    self.baseline = float(baseline_init)  # b of Formula 5 / Alg. 2 line 13
    self.meta_updates = 0  # t of Alg. 2
    self._draws = 0
    self._slots: dict[int, int] = {}  # Q-table phase: the device's state l*
    self._tables: dict[int, QTable] = {}
    self._pending: dict[int, _Pending] = {}
    self._history: list[tuple[int, int, float]] = []
    if pretrain_history is not None:
      self.pretrain(load_fetch_history(pretrain_history), passes=pretrain_passes)

  def _check_client(self, client: int) -> None:
    if not 0 <= client < self.num_clients:
      raise ValueError(f'client={client!r} is invalid; allowed values: 0..{self.num_clients - 1}')

  def propose(self, client: int, num_epochs: int) -> int:
    """Alg. 2 line 1: θ's slot before the device's first local aggregation, 𝓗^i's after."""
    self._check_client(client)
    _check_num_epochs(num_epochs)
    num_slots = num_epochs - 1
    if client not in self._tables:
      if self._rng.random() < self.epsilon:
        slot = int(self._rng.integers(1, num_slots + 1))
      else:
        slot = int(
          _choose_slot(
            self.spec,
            self.params,
            self._sample_key,
            self._draws,
            num_epochs,
            padded_length(num_epochs),
            self.meta_exploit,
          )
        )
        self._draws += 1
      self._pending[client] = _Pending(num_epochs, slot, from_meta=True)
      return slot
    state = min(self._slots[client], num_slots)
    action = self._tables[client].choose(state, num_slots, self.epsilon, self._rng)
    slot = state + ACTION_STEPS[action]
    self._slots[client] = slot
    self._pending[client] = _Pending(num_epochs, slot, from_meta=False, state=state, action=action)
    return slot

  def observe(self, client: int, fetch_epoch: int, reward: float) -> None:
    """Alg. 2 lines 13-14: the baseline, then θ (Formula 5) or 𝓗^i (Formula 6)."""
    self._check_client(client)
    pending = self._pending.get(client)
    if pending is None or pending.fetch_epoch != fetch_epoch:
      expected = None if pending is None else pending.fetch_epoch
      raise ValueError(
        f'observe(client={client}, fetch_epoch={fetch_epoch}) is invalid; '
        f'allowed fetch_epoch: the last proposal for the client ({expected})'
      )
    reward = float(reward)
    if not math.isfinite(reward):
      raise ValueError(f'reward={reward!r} is invalid; allowed values: a finite number')
    del self._pending[client]
    self._history.append((pending.num_epochs, fetch_epoch, reward))
    if pending.from_meta:
      self._meta_step(pending.num_epochs, fetch_epoch, reward)
      self._slots[client] = fetch_epoch  # 𝓗^i starts from the meta model's slot
      self._tables[client] = QTable(*self._q_settings)
      return
    if self.baseline_scope == BaselineScope.ALL:
      self._update_baseline(reward)
    self._tables[client].update(
      pending.state, pending.action, reward, fetch_epoch, pending.num_epochs - 1
    )

  def _update_baseline(self, reward: float) -> None:
    self.baseline = (1.0 - self.baseline_decay) * self.baseline + self.baseline_decay * reward

  def _meta_step(self, num_epochs: int, fetch_epoch: int, reward: float) -> None:
    self._update_baseline(reward)  # Alg. 2 line 13 before line 14
    self.params = reinforce_update(
      self.spec, self.params, num_epochs, fetch_epoch, reward - self.baseline, self.learning_rate
    )
    self.meta_updates += 1

  def pretrain(self, history: dict[str, np.ndarray], passes: int = 1) -> None:
    """Replays fetch records through the baseline and Formula 5 (the paper's pre-training
    "with some historical data"); the Q-tables are untouched."""
    columns = [np.asarray(history[key]) for key in HISTORY_KEYS]
    if len({column.shape for column in columns}) != 1 or columns[0].ndim != 1:
      raise ValueError(
        'algorithm.kwargs.fetch_pretrain_history is invalid; allowed: 1-D arrays '
        f'{list(HISTORY_KEYS)} of one length'
      )
    for num_epochs, fetch_epoch in zip(columns[0], columns[1]):
      _check_num_epochs(int(num_epochs))
      if not 1 <= fetch_epoch <= num_epochs - 1:
        raise ValueError(
          f'algorithm.kwargs.fetch_pretrain_history has fetch_epoch={fetch_epoch} with '
          f'num_epochs={num_epochs}; allowed: 1..num_epochs-1'
        )
    for _ in range(passes):
      for num_epochs, fetch_epoch, reward in zip(*columns):
        self._meta_step(int(num_epochs), int(fetch_epoch), float(reward))

  def meta_probabilities(self, num_epochs: int) -> np.ndarray:
    """P(l* = l; θ) for l = 1..num_epochs-1 ([num_epochs - 1]), before ε-exploration."""
    _check_num_epochs(num_epochs)
    log_probs = _slot_log_probs(self.spec, self.params, num_epochs, padded_length(num_epochs))
    return np.exp(np.asarray(log_probs)[: num_epochs - 1])

  def q_table(self, client: int) -> QTable | None:
    """Device `client`'s 𝓗^i; None while it is still served by the meta model."""
    return self._tables.get(client)

  def history_arrays(self) -> dict[str, np.ndarray]:
    """Every observed (num_epochs, fetch_epoch, reward), in order, for `pretrain`."""
    records = np.array(self._history, dtype=np.float64).reshape(-1, 3)
    return {
      'num_epochs': records[:, 0].astype(np.int64),
      'fetch_epoch': records[:, 1].astype(np.int64),
      'reward': records[:, 2],
    }

  def save_history(self, path: str) -> None:
    """Writes `history_arrays()` as an .npz for `algorithm.kwargs.fetch_pretrain_history`."""
    arrays = self.history_arrays()
    np.savez(
      path,
      num_epochs=arrays['num_epochs'],
      fetch_epoch=arrays['fetch_epoch'],
      reward=arrays['reward'],
    )
