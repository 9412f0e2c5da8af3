"""Log-normal client latency of "Learning from straggler clients in federated learning".

Hard et al. (Google Research), Section 3 ("Monte Carlo client latency simulation"), Tables 1
and 2. A client's round latency is

  T = T_communication + C + T_per-example * N_examples,

with the three factors independent and log-normal (ln X ~ Normal(mu, sigma), seconds). Each
participation draws a fresh triple (Sec. 3.2: "clients sampled different latency values each
time they participated"); nothing persists per client except its group and data size.

Two scenarios:
  * `per_example` (Table 1): one parameter set for every client; stragglers differ only in how
    many examples they hold.
  * `per_domain_per_example` (Table 2): clients holding the straggler data domain use a slower
    parameter set. Table 2's standard-client T_per-example (-2.0, 0.2) differs from Table 1's
    (-1.6, 0.5), so both tables are kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsim_jax.runtime.latency.base import (
  LATENCY_MODELS,
  LatencyContext,
  TaskLatency,
  check_federation,
)
from fedsim_jax.settings import ConfigError, Settings, one_of, setting
from fedsim_jax.str_enum import StrEnum


class LogNormalModel(StrEnum):
  """Which of the paper's log-normal latency tables applies (`latency.kwargs.model`)."""

  PER_EXAMPLE = 'per_example'  # Table 1: every client alike
  PER_DOMAIN_PER_EXAMPLE = 'per_domain_per_example'  # Table 2: straggler-domain holders slower


LOGNORMAL_MODELS = tuple(model.value for model in LogNormalModel)
FACTORS = ('communication', 'overhead', 'per_example')
GROUPS = ('standard', 'straggler')

# (mu, sigma) of ln X per group and factor. Table 1 uses one set for both groups.
_TABLE_1 = {'communication': (2.7, 1.0), 'overhead': (3.0, 0.3), 'per_example': (-1.6, 0.5)}
PAPER_TABLES: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
  'per_example': {'standard': dict(_TABLE_1), 'straggler': dict(_TABLE_1)},
  'per_domain_per_example': {
    'standard': {'communication': (2.7, 1.0), 'overhead': (3.0, 0.3), 'per_example': (-2.0, 0.2)},
    'straggler': {'communication': (3.7, 1.0), 'overhead': (3.5, 0.3), 'per_example': (-1.0, 0.5)},
  },
}

ParamsOverride = Mapping[str, Mapping[str, Sequence[float]]]


def lognormal_mean(mu: float, sigma: float) -> float:
  """Mean of X with ln X ~ Normal(mu, sigma): exp(mu + sigma^2 / 2)."""
  return math.exp(mu + 0.5 * sigma * sigma)


PREFIX = 'latency.kwargs.'


def _pair(name: str, value: Any) -> tuple[float, float]:
  """`value` as a (mu, sigma) pair with mu finite and sigma finite and >= 0."""
  try:
    mu, sigma = (float(v) for v in value)
  except (TypeError, ValueError):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: a (mu, sigma) pair') from None
  if not (math.isfinite(mu) and math.isfinite(sigma) and sigma >= 0):
    raise ConfigError(
      f'{name}={value!r} is invalid; allowed values: mu finite and sigma finite and >= 0'
    )
  return mu, sigma


def _overrides(name: str, params: Any) -> dict[str, dict[str, tuple[float, float]]]:
  """`params` (group -> factor -> (mu, sigma), or None) checked, with float pairs."""
  if params is None:
    return {}
  if not isinstance(params, Mapping):
    raise ConfigError(f'{name}={params!r} is invalid; allowed values: group -> factor -> pair')
  result: dict[str, dict[str, tuple[float, float]]] = {}
  for group, factors in params.items():
    if group not in GROUPS:
      raise ConfigError(f'{name}.{group} is not a group; allowed: {list(GROUPS)}')
    if not isinstance(factors, Mapping):
      raise ConfigError(f'{name}.{group}={factors!r} is invalid; allowed values: factor -> pair')
    for factor, value in factors.items():
      if factor not in FACTORS:
        raise ConfigError(f'{name}.{group}.{factor} is not a factor; allowed: {list(FACTORS)}')
      result.setdefault(group, {})[factor] = _pair(f'{name}.{group}.{factor}', value)
  return result


def _check_params(name: str, value: Any) -> None:
  _overrides(name, value)


_check_params.allowed = (  # type: ignore[attr-defined]
  "None, or {group: {factor: (mu, sigma)}} with groups 'standard', 'straggler' and factors "
  "'communication', 'overhead', 'per_example'"
)


@dataclasses.dataclass(frozen=True)
class LogNormalSettings(Settings):
  """Settings of `LogNormalLatency` (`latency.name='lognormal'`)."""

  model: str = setting(
    'per_example', one_of(LOGNORMAL_MODELS), "the paper's scenario: Table 1 or Table 2"
  )
  params: ParamsOverride | None = setting(
    None, _check_params, "(mu, sigma) overrides of the paper's table (None: the table)"
  )


def resolve_params(
  model: str, params: ParamsOverride | None = None
) -> dict[str, dict[str, tuple[float, float]]]:
  """The paper's table for `model` with `params` entries replacing (mu, sigma) per group/factor.

  `params` maps group -> factor -> (mu, sigma); any group or factor left out keeps the paper's
  value, so `{'straggler': {'communication': (4.0, 1.0)}}` changes one entry only.
  """
  LogNormalSettings(model, params).validate(PREFIX)
  table = {group: dict(factors) for group, factors in PAPER_TABLES[model].items()}
  for group, factors in _overrides(f'{PREFIX}params', params).items():
    table[group].update(factors)
  return table


def closed_form_means(
  model: str = 'per_example', params: ParamsOverride | None = None
) -> dict[str, dict[str, float]]:
  """Closed-form mean seconds of each factor, per group: {group: {factor: mean}}."""
  table = resolve_params(model, params)
  return {
    group: {factor: lognormal_mean(*table[group][factor]) for factor in FACTORS} for group in GROUPS
  }


class LogNormalLatency:
  """Per-task log-normal latency (Hard et al., Tables 1 and 2).

  Every `sample` draws, in this order, T_comm, C and T_per-example from the client's group
  parameters and returns `TaskLatency(communication=T_comm, overhead=C,
  per_step=T_per-example * examples_per_step[client])`. The paper multiplies one per-example
  draw by the client's example count, so a task of `s` steps with `s * examples_per_step ~= N`
  (one local epoch) lasts T_comm + C + T_per-example * N, as in the paper.

  Args:
    num_clients: federation size.
    rng: this model's own generator (derive it from the run seed).
    examples_per_step: examples one local step processes, per client (min(batch_size,
      client_size)); an int applies to every client.
    straggler_mask: True for straggler clients. Required by `per_domain_per_example`, where it
      selects the slower parameter set; under `per_example` it only labels groups (both groups
      share Table 1).
    model: one of `LOGNORMAL_MODELS`.
    params: overrides of (mu, sigma), group -> factor -> pair (see `resolve_params`); defaults
      are the paper's tables (`PAPER_TABLES`).
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    examples_per_step: np.ndarray | int,
    straggler_mask: np.ndarray | None = None,
    model: str = 'per_example',
    params: ParamsOverride | None = None,
  ) -> None:
    check_federation(num_clients, rng)
    LogNormalSettings(model, params).validate(PREFIX)
    examples = np.asarray(examples_per_step)
    if examples.ndim == 0:
      examples = np.full(num_clients, examples)
    if (
      examples.shape != (num_clients,)
      or not np.issubdtype(examples.dtype, np.integer)
      or np.any(examples < 1)
    ):
      raise ValueError(
        f'latency.examples_per_step={examples_per_step!r}; must be an int or '
        f'{num_clients} ints, all >= 1'
      )
    if straggler_mask is None:
      if model == LogNormalModel.PER_DOMAIN_PER_EXAMPLE:
        raise ValueError(
          'latency.straggler_mask=None; per_domain_per_example needs a boolean '
          'mask of straggler clients'
        )
      mask = np.zeros(num_clients, bool)
    else:
      mask = np.asarray(straggler_mask)
      if mask.shape != (num_clients,) or mask.dtype != np.bool_:
        raise ValueError(
          f'latency.straggler_mask (shape {mask.shape}, dtype {mask.dtype}); '
          f'must be {num_clients} bools'
        )
    self.num_clients = int(num_clients)
    self.rng = rng
    self.model = model
    self.examples_per_step = examples.astype(np.int64)
    self.straggler_mask = mask.copy()
    self.params = resolve_params(model, params)
    # Rows indexed by group (0 standard, 1 straggler), columns by FACTORS: lets sample_many
    # gather per-task parameters without a Python loop.
    self._mu = np.array([[self.params[g][f][0] for f in FACTORS] for g in GROUPS])
    self._sigma = np.array([[self.params[g][f][1] for f in FACTORS] for g in GROUPS])

  def group(self, client_id: int) -> str:
    """'straggler' or 'standard'."""
    return GROUPS[int(self.straggler_mask[client_id])]

  def mean_factors(self, group: str) -> dict[str, float]:
    """Closed-form mean seconds of T_comm ('communication'), C ('overhead') and
    T_per-example ('per_example') for `group`."""
    if group not in GROUPS:
      raise ValueError(f'latency.group={group!r}; allowed: {GROUPS}')
    return {factor: lognormal_mean(*self.params[group][factor]) for factor in FACTORS}

  def expected_step_time(self, client_id: int) -> float:
    return self.mean_factors(self.group(client_id))['per_example'] * float(
      self.examples_per_step[client_id]
    )

  def expected_duration(self, client_id: int, num_examples: int) -> float:
    """Closed-form mean latency of a task that processes `num_examples` examples."""
    means = self.mean_factors(self.group(client_id))
    return means['communication'] + means['overhead'] + means['per_example'] * num_examples

  def sample(self, client_id: int) -> TaskLatency:
    g = int(self.straggler_mask[client_id])
    comm, overhead, per_example = (
      float(self.rng.lognormal(self._mu[g, k], self._sigma[g, k])) for k in range(len(FACTORS))
    )
    return TaskLatency(
      communication=comm,
      overhead=overhead,
      per_step=per_example * float(self.examples_per_step[client_id]),
    )

  def sample_many(self, client_ids: np.ndarray) -> TaskLatency:
    """Vectorised draws for many tasks at once; fields are arrays aligned with `client_ids`.

    Same distribution as calling `sample` per id (not the same random stream): for
    Monte Carlo statistics, not for the simulation's per-task path.
    """
    ids = np.asarray(client_ids, np.int64)
    g = self.straggler_mask[ids].astype(np.int64)
    comm, overhead, per_example = (
      self.rng.lognormal(self._mu[g, k], self._sigma[g, k]) for k in range(len(FACTORS))
    )
    return TaskLatency(
      communication=comm, overhead=overhead, per_step=per_example * self.examples_per_step[ids]
    )


@LATENCY_MODELS.register('lognormal', LogNormalSettings)
def lognormal(settings: LogNormalSettings, context: LatencyContext) -> LogNormalLatency:
  """Log-normal communication + overhead + per-example time x examples (straggler paper).

  A local step processes min(batch size, client size) examples."""
  sizes = np.asarray(context.client_sizes, np.int64)
  return LogNormalLatency(
    context.num_clients,
    context.rng,
    examples_per_step=np.minimum(context.batch_size, sizes),
    straggler_mask=context.straggler_mask,
    model=settings.model,
    params=settings.params,
  )
