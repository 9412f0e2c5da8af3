"""Computation budgets and training schedules of CC-FedAvg (host-side numpy, no JAX).

Zhang, Wu, Cheng and Liu, "CC-FedAvg: Computationally Customized Federated
Averaging" (IEEE IoT-J 2024). Client i has a budget ratio p_i in (0, 1]: "for
round t, if client i is in S_t, it skips local iterations in this round with
probability 1 - p_i" (Sec. III-B). A skipping client does not run local SGD; what
it sends instead (nothing, a stale model, or CC-FedAvg's estimate Delta^i_{t-1})
is the strategy's business, not this module's.

Budget rules (each returns p, shape [N], values in (0, 1]):

* `beta_levels`: p_i = (1/2)^floor(beta * i / N), i 0-based (Sec. VI-A).
* `two_group_budgets`: a fraction r of clients has p = 1/W, the rest 1
  (Sec. IV-A Theorem 1 and Sec. VI-E, Fig. 5).
* `uniform_budgets`: p = 1/W for every client, CC-FedAvg(r = 1) (Sec. V, VI-F).

Training schedules decide, for a client selected in round t, whether it trains
(True) or skips (False):

* `AdHocSchedule`: Bernoulli(p_i) every round, the "ad-hoc" schedule (Sec. VI-A),
  the paper's default after Table I.
* `RoundRobinSchedule`: trains once, then skips 1/p_i - 1 rounds, the
  "round-robin" schedule (Sec. VI-A).
* `SynchronisedSchedule`: every client trains at t % W == 0 and skips the W - 1
  rounds after, the FedOpt-like analogue (Sec. VI-F).
* `QuotaSchedule`: FedAvg (dropout): trains while its quota p_i * T of rounds
  lasts, then drops out (Sec. VI-B, Table I).

`make_schedule(name, budgets, rng, **settings)` builds one by its name in
`SCHEDULES`. All randomness comes from the numpy Generator given at construction:
the same seed gives the same decisions, whatever order rounds and clients are
asked in.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import numpy as np

from fedsim_jax.str_enum import StrEnum

_INT_TOLERANCE = 1e-9


def _is_int(value: object) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_int(name: str, value: int, minimum: int) -> int:
  if not _is_int(value) or value < minimum:
    raise ValueError(f'{name}={value!r} is invalid; allowed: integers >= {minimum}')
  return int(value)


def _check_rng(rng: object, name: str = 'rng') -> np.random.Generator:
  if not isinstance(rng, np.random.Generator):
    raise ValueError(f'{name}={rng!r} is invalid; allowed: a numpy.random.Generator')
  return rng


def check_budgets(budgets: np.ndarray) -> np.ndarray:
  """Returns `budgets` as a float64 array [N] after checking every p_i is in (0, 1].

  Raises:
    ValueError: not a non-empty 1-D array of finite values in (0, 1].
  """
  p = np.asarray(budgets, dtype=np.float64)
  if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p <= 0) or np.any(p > 1):
    raise ValueError(
      f'budgets={budgets!r} is invalid; allowed: a non-empty 1-D array of values in (0, 1]'
    )
  return p


# ---------------------------------------------------------------------------
# Budget rules.


def beta_levels(num_clients: int, beta: int, rng: np.random.Generator | None = None) -> np.ndarray:
  """The paper's beta-level budgets p_i = (1/2)^floor(beta * i / N) (Sec. VI-A).

  "p_i = (1/2)^{floor(beta i / N)}, where beta controls the number of
  heterogeneous resource levels ... there are ceil(N / beta) clients with
  p_i = 1" (Sec. VI-A). The index i is 0-based (i = 0..N-1): that is the only
  reading under which beta = 4 gives the four levels 1, 0.5, 0.25, 0.125 the
  paper lists for Table I (1-based i would give one client 1/16). The floor is
  computed in integers, (beta * i) // N, so it is exact. With beta = 4, N = 8:
  [1, 1, .5, .5, .25, .25, .125, .125]. When N is not a multiple of beta the
  groups differ in size by one (the authors' code instead gives N // 4 clients
  to each of the three low levels and the rest p = 1; not used).

  Args:
    num_clients: N >= 1.
    beta: number of levels, an integer >= 1 (beta = 1 gives p = 1 for all).
    rng: None keeps the levels in client order (p non-increasing in i, as the
      formula). A Generator assigns the levels to random clients, returning
      levels[rng.permutation(N)], as the cross-device experiments do ("We assign
      p_i at random", Appendix D, Table II).

  Raises:
    ValueError: invalid num_clients, beta or rng.
  """
  n = _check_int('num_clients', num_clients, 1)
  beta = _check_int('beta', beta, 1)
  levels = 0.5 ** ((beta * np.arange(n, dtype=np.int64)) // n)
  if rng is None:
    return levels.astype(np.float64)
  return levels[_check_rng(rng).permutation(n)].astype(np.float64)


def _num_constrained(num_clients: int, r: float) -> int:
  """round(r * N) with halves rounded up, so float noise (0.29 * 100 = 28.999...) is harmless."""
  return int(math.floor(r * num_clients + 0.5))


def two_group_budgets(
  num_clients: int,
  r: float,
  w: int,
  rng: np.random.Generator | None = None,
  *,
  constrained_first: bool = True,
) -> np.ndarray:
  """Two groups (r, W): round(r * N) clients have p = 1/W, the rest p = 1 (Sec. VI-E).

  Theorem 1 (Sec. IV-A) has "r N (r in [0, 1]) participants with insufficient
  resources" that train "at least once every W rounds"; the Fig. 5 experiments
  vary r and W with p = 1/W for the constrained group. r = 0 or W = 1 is FedAvg.

  The number of constrained clients is round(r * N) with halves rounded up
  (the authors' code uses int(N * r), a floor; both agree whenever r * N is an
  integer, as in all the paper's settings N = 8, 100 and r in {.25, .5, .75, 1};
  rounding to nearest also avoids float noise such as 0.29 * 100 = 28.999...).
  Which clients are constrained is unstated in the paper; with rng None they are
  the first ones (indices 0..round(rN) - 1), as in the authors' code, or the last
  ones when `constrained_first` is False. A Generator permutes the result.

  Args:
    num_clients: N >= 1.
    r: fraction of clients with insufficient resources, in [0, 1].
    w: W, an integer >= 1; constrained clients have p = 1/W.
    rng: optional Generator assigning the budgets to random clients.
    constrained_first: with rng None, put the constrained clients first.

  Raises:
    ValueError: invalid num_clients, r, w or rng.
  """
  n = _check_int('num_clients', num_clients, 1)
  if (
    isinstance(r, bool)
    or not isinstance(r, (int, float, np.number))
    or not math.isfinite(r)
    or not 0 <= r <= 1
  ):
    raise ValueError(f'r={r!r} is invalid; allowed: numbers in [0, 1]')
  w = _check_int('w', w, 1)
  m = _num_constrained(n, float(r))
  budgets = np.ones(n, dtype=np.float64)
  if constrained_first:
    budgets[:m] = 1.0 / w
  else:
    budgets[n - m :] = 1.0 / w
  if rng is None:
    return budgets
  return budgets[_check_rng(rng).permutation(n)]


def uniform_budgets(num_clients: int, w: int) -> np.ndarray:
  """p = 1/W for every client: CC-FedAvg(r = 1), the computation-efficient mode (Sec. V).

  "in each training round of FL, each participant executes local training with
  probability 1/W and estimates local model with probability (1 - 1/W)" (Sec. V).

  Raises:
    ValueError: invalid num_clients or w.
  """
  n = _check_int('num_clients', num_clients, 1)
  w = _check_int('w', w, 1)
  return np.full(n, 1.0 / w, dtype=np.float64)


# ---------------------------------------------------------------------------
# Training schedules.


class TrainingSchedule(abc.ABC):
  """Decides whether a client selected in round t trains (True) or skips (False).

  Algorithm 1, lines 6-7 (Sec. III-C): "if not skip this round then /* with
  probability p_i (determined in advance or in real time based on local
  computational resource) */". Rounds are the global round index t = 0, 1, ...
  (0-based, as in Algorithm 1's "for t = 0 to T - 1").

  `has_trained_before` tells whether the client holds any earlier local update;
  schedules with `first_selection_trains` make such a client train, because
  the estimate Delta^i_{t-1} it would send does not exist yet.
  """

  num_clients: int | None
  first_selection_trains: bool = False

  def trains(self, client: int, round_index: int, has_trained_before: bool) -> bool:
    """Whether `client`, selected in round `round_index`, trains this round.

    Raises:
      ValueError: client outside 0..N-1 or round_index < 0.
    """
    if self.num_clients is None:
      _check_int('client', client, 0)
    elif not _is_int(client) or not 0 <= client < self.num_clients:
      raise ValueError(f'client={client!r} is invalid; allowed: integers 0..{self.num_clients - 1}')
    _check_int('round_index', round_index, 0)
    if self.first_selection_trains and not has_trained_before:
      return True
    return self._decide(int(client), int(round_index))

  def round_mask(self, round_index: int) -> np.ndarray:
    """The schedule's decisions for all N clients in a round, ignoring history: bool [N]."""
    self._require_num_clients()
    _check_int('round_index', round_index, 0)
    return self._scheduled(int(round_index)).copy()

  def mask(self, num_rounds: int) -> np.ndarray:
    """Decisions for rounds 0..num_rounds-1 and all clients, ignoring history: bool [T, N]."""
    num_clients = self._require_num_clients()
    num_rounds = _check_int('num_rounds', num_rounds, 0)
    if num_rounds == 0:
      return np.zeros((0, num_clients), dtype=bool)
    return np.stack([self._scheduled(t) for t in range(num_rounds)])

  def _require_num_clients(self) -> int:
    if self.num_clients is None:
      raise ValueError(
        'num_clients=None is invalid for a whole-federation mask; allowed: an integer >= 1'
      )
    return self.num_clients

  def _decide(self, client: int, round_index: int) -> bool:
    return bool(self._scheduled(round_index)[client])

  @abc.abstractmethod
  def _scheduled(self, round_index: int) -> np.ndarray:
    """Bool [N]: the schedule's decision in round `round_index` for every client."""


def training_mask(schedule: TrainingSchedule, selected: np.ndarray) -> np.ndarray:
  """Effective train mask: selected and scheduled, with the history rule applied.

  Args:
    schedule: the training schedule.
    selected: bool [T, N], whether client i is selected (in S_t) in round t.

  Returns:
    bool [T, N]: True where client i is selected in round t and trains. A
    client's `has_trained_before` is whether it trained in an earlier round.

  Raises:
    ValueError: `selected` is not a bool array [T, N] with N = schedule.num_clients.
  """
  num_clients = schedule._require_num_clients()
  selected = np.asarray(selected)
  if selected.dtype != bool or selected.ndim != 2 or selected.shape[1] != num_clients:
    raise ValueError(
      f'selected with dtype {selected.dtype} and shape {selected.shape} is invalid; '
      f'allowed: a bool array [T, {schedule.num_clients}]'
    )
  out = np.zeros_like(selected)
  trained: np.ndarray = np.zeros(num_clients, dtype=bool)
  for t in range(selected.shape[0]):
    decision = schedule._scheduled(t)
    if schedule.first_selection_trains:
      decision = decision | ~trained
    out[t] = selected[t] & decision
    trained |= out[t]
  return out


class AdHocSchedule(TrainingSchedule):
  """The "ad-hoc" schedule: trains with probability p_i, independently every round.

  "Client i skips each round with probability 1 - p_i. This schedule simulates
  the situation that the client can schedule tasks in time" (Sec. VI-A); the
  default after Table I ("in the following we set 'ad-hoc' schedule as
  default", Sec. VI-B).

  The paper does not say what a client does when it must skip but has never
  trained (Delta^i_{t-1} does not exist). With `first_selection_trains` (the
  default) it trains, which is the authors' code behaviour (every client trains
  in round 0, and a client with no stored update trains normally); with False
  the Bernoulli draw decides and the strategy must handle a skip with no history
  (the proof's convention is Delta = 0 for t < 0).

  Draws: a seed is taken from `rng` once, at construction; round t's N uniforms
  come from a Generator seeded with (that seed, t), so decisions do not depend on
  the order rounds are asked in, and client i trains in round t iff u[t, i] < p_i
  (as the authors' code: `rand < p_i`). p_i = 1 always trains.
  """

  def __init__(
    self, budgets: np.ndarray, rng: np.random.Generator, first_selection_trains: bool = True
  ):
    self.budgets = check_budgets(budgets)
    self.num_clients = self.budgets.size
    self._seed = int(_check_rng(rng).integers(0, 2**63 - 1))
    self.first_selection_trains = bool(first_selection_trains)
    self._cached_round = -1
    self._cached = np.zeros(self.num_clients, dtype=bool)

  def _scheduled(self, round_index: int) -> np.ndarray:
    if round_index != self._cached_round:
      uniforms = np.random.default_rng([self._seed, round_index]).random(self.num_clients)
      self._cached = uniforms < self.budgets
      self._cached_round = round_index
    return self._cached


class RoundRobinPhase(StrEnum):
  """The round-robin schedule's phases (`algorithm.kwargs.phase`)."""

  ZERO = 'zero'
  RANDOM = 'random'


ROUND_ROBIN_PHASES = tuple(phase.value for phase in RoundRobinPhase)


def _periods(budgets: np.ndarray, setting: str) -> np.ndarray:
  """1/p_i as integers; ValueError when some 1/p_i is not an integer."""
  inverse = 1.0 / budgets
  periods = np.rint(inverse)
  bad = np.abs(inverse - periods) > _INT_TOLERANCE * np.maximum(1.0, inverse)
  if np.any(bad):
    raise ValueError(
      f'{setting}: budgets {budgets[bad].tolist()} are invalid for this schedule; '
      'allowed: values with 1/p_i an integer (1, 1/2, 1/3, ...)'
    )
  return periods.astype(np.int64)


class RoundRobinSchedule(TrainingSchedule):
  """The "round-robin" schedule: trains once, then skips 1/p_i - 1 rounds (Sec. VI-A).

  "Client i skips (1/p_i - 1) rounds after performing local training once
  strictly. This schedule simulates the situation that the client can schedule
  tasks in advance" (Sec. VI-A). With k_i = 1/p_i (an integer), client i trains
  in round t iff (t + phase_i) mod k_i == 0.

  The phase is not stated in the paper. 'zero' (default) sets every phase_i = 0,
  as the authors' (commented-out) code `global_round % (1/p) == 0`: every client
  trains in round 0 and clients with the same p are in step. 'random' draws
  phase_i uniformly from 0..k_i - 1 with `rng`, de-synchronising them.

  `first_selection_trains` (default False: the schedule is strict) makes a client
  that has never trained train anyway; with phase 'zero' and full participation
  it changes nothing, since every client trains in round 0.

  Raises:
    ValueError: some 1/p_i is not an integer, unknown phase, or phase 'random'
      without a Generator.
  """

  def __init__(
    self,
    budgets: np.ndarray,
    phase: str = 'zero',
    rng: np.random.Generator | None = None,
    first_selection_trains: bool = False,
  ):
    self.budgets = check_budgets(budgets)
    self.num_clients = self.budgets.size
    self.periods = _periods(self.budgets, 'round_robin')
    if phase == RoundRobinPhase.ZERO:
      self.phases = np.zeros(self.num_clients, dtype=np.int64)
    elif phase == RoundRobinPhase.RANDOM:
      if rng is None:
        raise ValueError(
          "rng=None is invalid with phase='random'; allowed: a numpy.random.Generator"
        )
      self.phases = _check_rng(rng).integers(0, self.periods)
    else:
      raise ValueError(f'phase={phase!r} is invalid; allowed: {", ".join(ROUND_ROBIN_PHASES)}')
    self.phase = phase
    self.first_selection_trains = bool(first_selection_trains)

  def _scheduled(self, round_index: int) -> np.ndarray:
    return (round_index + self.phases) % self.periods == 0


class SynchronisedSchedule(TrainingSchedule):
  """All clients train in rounds t % W == 0 and skip the W - 1 rounds after (Sec. VI-F).

  "if all clients estimate local models in sequential W - 1 rounds after execute
  local training in one round (denote as round t), the aggregated model at round
  t + W - 1 are x_t + (W - 1) Delta_t, where (W - 1) can be viewed as the global
  learning rate in FedOpt" (Sec. VI-F). The paper does not say which round
  trains first; round 0 does here (as the authors' code, `global_round % W == 0`).

  `first_selection_trains` (default False) makes a client that has never trained
  train anyway (only matters under partial participation). `num_clients` is
  needed only for the whole-federation masks (`round_mask`, `mask`,
  `training_mask`); `trains` works without it.

  Raises:
    ValueError: w not an integer >= 1, or num_clients neither None nor an
      integer >= 1.
  """

  def __init__(self, w: int, num_clients: int | None = None, first_selection_trains: bool = False):
    self.w = _check_int('w', w, 1)
    self.num_clients = None if num_clients is None else _check_int('num_clients', num_clients, 1)
    self.first_selection_trains = bool(first_selection_trains)

  def _decide(self, client: int, round_index: int) -> bool:
    return round_index % self.w == 0

  def _scheduled(self, round_index: int) -> np.ndarray:
    return np.full(self._require_num_clients(), round_index % self.w == 0)


class QuotaSchedule(TrainingSchedule):
  """FedAvg (dropout): a client trains while its quota of p_i * T rounds lasts (Sec. VI-B).

  "FedAvg (dropout) denotes FedAvg with computation limitation (due to energy
  deficiency) that the clients would drop out after the quota of participation
  round is exhausted. For instance, if total number of round is 400, the clients
  with p_i = 0.5 would drop out after 200 rounds of training" (Sec. VI-B).

  The quota is counted on the global round index t (0-based), not on the rounds
  a client is selected, as in the authors' code; the paper does not say. By
  default client i trains iff t < p_i * T, which gives exactly the paper's 200
  training rounds (t = 0..199) for p_i = 0.5, T = 400 (ceil(p_i * T) rounds in
  general). The authors' code trains iff p_i * T >= t (0-based t), one round
  more (201); `inclusive=True` reproduces it. A client past its quota skips, and
  FedAvg (dropout) ignores it (Strategy 1 aggregation); it never trains again,
  whatever its history.

  Raises:
    ValueError: invalid budgets or total_rounds.
  """

  def __init__(self, budgets: np.ndarray, total_rounds: int, inclusive: bool = False):
    self.budgets = check_budgets(budgets)
    self.num_clients = self.budgets.size
    self.total_rounds = _check_int('total_rounds', total_rounds, 1)
    self.quotas = self.budgets * self.total_rounds
    self.inclusive = bool(inclusive)
    self.first_selection_trains = False

  def _scheduled(self, round_index: int) -> np.ndarray:
    if self.inclusive:
      return round_index <= self.quotas
    return round_index < self.quotas


def _make_ad_hoc(budgets: np.ndarray, rng: np.random.Generator, **settings) -> TrainingSchedule:
  return AdHocSchedule(budgets, rng, **settings)


def _make_round_robin(
  budgets: np.ndarray, rng: np.random.Generator, **settings
) -> TrainingSchedule:
  return RoundRobinSchedule(budgets, rng=rng, **settings)


def _make_synchronised(
  budgets: np.ndarray, rng: np.random.Generator, **settings
) -> TrainingSchedule:
  p = check_budgets(budgets)
  if 'w' not in settings:
    if not np.all(p == p[0]):
      raise ValueError(
        'synchronised schedule without w needs equal budgets; allowed: pass w, or '
        'budgets all equal to 1/W'
      )
    settings['w'] = int(_periods(p[:1], 'synchronised')[0])
  return SynchronisedSchedule(num_clients=p.size, **settings)


def _make_quota(budgets: np.ndarray, rng: np.random.Generator, **settings) -> TrainingSchedule:
  return QuotaSchedule(budgets, **settings)


SCHEDULES: dict[str, Callable[..., TrainingSchedule]] = {
  'ad_hoc': _make_ad_hoc,
  'round_robin': _make_round_robin,
  'synchronised': _make_synchronised,
  'quota': _make_quota,
}
"""Schedule name -> factory(budgets, rng, **settings); call through `make_schedule`."""


def make_schedule(
  name: str, budgets: np.ndarray, rng: np.random.Generator | None, **settings: object
) -> TrainingSchedule:
  """Builds the training schedule named `name` for clients with budgets p.

  Settings: 'ad_hoc' takes `first_selection_trains` (and needs `rng`);
  'round_robin' takes `phase` ('zero' | 'random', the latter needs `rng`) and
  `first_selection_trains`; 'synchronised' takes `w` (default: W with all
  budgets equal to 1/W) and `first_selection_trains`; 'quota' takes
  `total_rounds` (required) and `inclusive`.

  Raises:
    ValueError: unknown `name` or invalid settings.
  """
  if name not in SCHEDULES:
    raise ValueError(f'schedule={name!r} is invalid; allowed: {", ".join(SCHEDULES)}')
  if name == 'quota' and 'total_rounds' not in settings:
    raise ValueError('total_rounds is missing for the quota schedule; allowed: an integer >= 1')
  return SCHEDULES[name](budgets, rng, **settings)
