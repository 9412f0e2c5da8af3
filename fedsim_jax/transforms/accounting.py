"""Privacy accounting of DP runs with Google's `dp-accounting` (RDP or PLD).

Central DP (DP-FedAvg, McMahan et al. 2018, Sec. 2-3): each noised aggregation is a Gaussian
mechanism of noise multiplier z on a Poisson sample of the clients with rate q = m / N (m the
expected updates per aggregation, N the clients), composed over the T aggregations made so far.
That sampling is an assumption: a synchronous cohort drawn uniformly matches it up to Poisson
versus fixed-size sampling; an asynchronous buffer (DP-FedBuff) is filled by whichever clients
finish first, which no accountant models, so its epsilon is the one that random participation
at the same rate would have (docs/privacy.md states this for every result).

Local DP: each update a client sends is its own Gaussian mechanism of noise multiplier z (no
sampling amplification), so a client's epsilon composes the updates it sent; the run reports
the largest over clients.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING

import jax

from fedsim_jax.str_enum import StrEnum
from fedsim_jax.transforms.privacy import ClipState

if TYPE_CHECKING:
  import dp_accounting

# `dp_accounting` (with scipy and mpmath) takes about a second to import: it is imported where
# epsilon is computed, so that runs without DP, and every process a test starts, do not pay it.


class AccountantKind(StrEnum):
  """Which accountant turns the run's mechanisms into (epsilon, delta)."""

  RDP = 'rdp'  # Renyi DP (Mironov 2017; subsampled Gaussian: Mironov, Talwar, Zhang 2019)
  PLD = 'pld'  # privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022): tighter


def central_event(
  sampling_rate: float, noise_multiplier: float, steps: int
) -> dp_accounting.DpEvent:
  """`steps` Poisson-subsampled Gaussian mechanisms (rate q, noise multiplier z)."""
  import dp_accounting

  gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
  if sampling_rate < 1.0:
    gaussian = dp_accounting.PoissonSampledDpEvent(sampling_rate, gaussian)
  return dp_accounting.SelfComposedDpEvent(gaussian, steps)


def local_event(noise_multiplier: float, releases: int) -> dp_accounting.DpEvent:
  """`releases` Gaussian mechanisms of noise multiplier z, unsampled (one client's updates)."""
  import dp_accounting

  return dp_accounting.SelfComposedDpEvent(
    dp_accounting.GaussianDpEvent(noise_multiplier), releases
  )


class _QuietOrders(logging.Filter):
  """Drops the RDP accountant's notes that an order's series did not converge (it leaves that
  order out of the minimum, as it says; one note per order and call would flood the log)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.pathname.endswith('rdp_privacy_accountant.py')


def epsilon_of(event: dp_accounting.DpEvent, delta: float, kind: AccountantKind) -> float:
  """The epsilon of `event` at `delta` by accountant `kind` (inf without noise)."""
  from dp_accounting import pld, rdp

  accountant = rdp.RdpAccountant() if kind == AccountantKind.RDP else pld.PLDAccountant()
  quiet = _QuietOrders()
  absl_logger = logging.getLogger('absl')
  absl_logger.addFilter(quiet)
  try:
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))
  finally:
    absl_logger.removeFilter(quiet)


@dataclasses.dataclass(frozen=True)
class PrivacyLedger:
  """How a DP run's releases turn into epsilon: what the metrics rows, the summary and the
  epsilon budget read."""

  noise_multiplier: float
  delta: float
  kind: AccountantKind
  central: bool
  sampling_rate: float  # q = m / N (central)

  def epsilon(self, releases: int) -> float:
    """Epsilon at `delta` after `releases` noised aggregations (central), or after a client
    sent `releases` updates (local); 0 before any."""
    if releases <= 0:
      return 0.0
    if self.noise_multiplier == 0.0:
      return float('inf')
    return _cached_epsilon(self, int(releases))


@functools.lru_cache(maxsize=4096)
def _cached_epsilon(ledger: PrivacyLedger, releases: int) -> float:
  if ledger.central:
    event = central_event(ledger.sampling_rate, ledger.noise_multiplier, releases)
  else:
    event = local_event(ledger.noise_multiplier, releases)
  return epsilon_of(event, ledger.delta, ledger.kind)


class BudgetExhausted(Exception):
  """The next aggregation would take the run past its epsilon budget."""


@dataclasses.dataclass(frozen=True)
class PrivacyMonitor:
  """A DP run's privacy as its lifecycle reports and enforces it: epsilon in every metrics row
  and in the summary, and a stop before an aggregation that would exceed `budget`."""

  ledger: PrivacyLedger
  budget: float | None

  def _clip_state(self, server_state: object) -> ClipState:
    found = [
      leaf
      for leaf in jax.tree_util.tree_leaves(
        server_state, is_leaf=lambda node: isinstance(node, ClipState)
      )
      if isinstance(leaf, ClipState)
    ]
    assert len(found) == 1, 'a DP run has one clipping state'
    return found[0]

  def releases(self, server_state: object) -> int:
    """The accountant's count so far (`ClipState.accounted_releases`)."""
    return self._clip_state(server_state).accounted_releases(self.ledger.central)

  def row(self, server_state: object) -> dict[str, float]:
    """What a metrics row reports: epsilon at delta so far, and the clipping norm in use."""
    state = self._clip_state(server_state)
    return {
      'epsilon': self.ledger.epsilon(state.accounted_releases(self.ledger.central)),
      'clip_norm': float(state.clip_norm),
    }

  def check_next(self, server_state: object) -> None:
    """Raises `BudgetExhausted` when one more release would exceed the budget."""
    if self.budget is None:
      return
    releases = self.releases(server_state)
    after = self.ledger.epsilon(releases + 1)
    if after > self.budget:
      raise BudgetExhausted(
        f'privacy budget reached: epsilon {self.ledger.epsilon(releases):.4g} after {releases} '
        f'releases; one more would give {after:.4g} > privacy.kwargs.epsilon_budget='
        f'{self.budget:g} (delta {self.ledger.delta:.3g})'
      )

  def summary(self, server_state: object) -> dict[str, object]:
    """The summary's `privacy` section."""
    releases = self.releases(server_state)
    return {
      'epsilon': self.ledger.epsilon(releases),
      'delta': self.ledger.delta,
      'releases': releases,
      'accountant': str(self.ledger.kind),
      'placement': 'central' if self.ledger.central else 'local',
      'noise_multiplier': self.ledger.noise_multiplier,
      'sampling_rate': self.ledger.sampling_rate,
      'epsilon_budget': self.budget,
    }
