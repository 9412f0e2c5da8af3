"""The config's update-transform sections as plugins: `attack`, `privacy`, `compression` and
`robust`, each a registry of named transforms with typed settings (`fedsim_jax.registry`).

A run's transforms are chained in the order updates travel (`build_transform`): the malicious
clients tamper with their updates (`attack`); under local DP each client clips and noises its
update (`privacy`, placement 'local'); the update is compressed for the upload (`compression`);
the server forms a robust estimate of the batch (`robust`); under central DP it clips each
update and replaces the batch by its noised fixed-denominator mean (`privacy`, placement
'central'). Each section's default ('none', or 'mean' for `robust`) leaves updates untouched,
and a run with every default builds no transform at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from fedsim_jax.registry import Registry, Selection
from fedsim_jax.settings import (
  ConfigError,
  Settings,
  boolean,
  number,
  one_of,
  positive,
  setting,
)
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.transforms import attacks, compression, privacy, robust
from fedsim_jax.transforms.accounting import AccountantKind, PrivacyLedger, PrivacyMonitor
from fedsim_jax.transforms.base import UpdateTransform, chain


@dataclasses.dataclass(frozen=True)
class TransformContext:
  """What a transform's factory may know of the run."""

  num_clients: int
  seed: int  # the run's seed (the attackers' draw)
  # Updates each aggregation expects (the algorithm's cohort_size or buffer_size; None when it
  # has neither): DP's fixed denominator and Krum's minimum batch.
  updates_per_aggregation: int | None
  num_params: int = 0  # coordinates of one update (compression's bytes)


TransformFactory = Callable[[Any, TransformContext], UpdateTransform | None]

ATTACKS: Registry[TransformFactory] = Registry('attack', 'attack')
PRIVACY: Registry[TransformFactory] = Registry('privacy', 'privacy mechanism')
COMPRESSORS: Registry[TransformFactory] = Registry('compression', 'compressor')
ROBUST_AGGREGATORS: Registry[TransformFactory] = Registry('robust', 'robust aggregator')

# The sections in the order their transforms apply to an update (see the module docstring).
SECTIONS: dict[str, Registry[TransformFactory]] = {
  'attack': ATTACKS,
  'privacy': PRIVACY,
  'compression': COMPRESSORS,
  'robust': ROBUST_AGGREGATORS,
}
DEFAULTS = {'attack': 'none', 'privacy': 'none', 'compression': 'none', 'robust': 'mean'}


@dataclasses.dataclass(frozen=True)
class NoSettings(Settings):
  """A transform without settings."""


# --- attacks -------------------------------------------------------------------------------

_FRACTION = number(above=0, maximum=1)


@dataclasses.dataclass(frozen=True)
class AttackSettings(Settings):
  fraction: float = setting(0.1, _FRACTION, 'fraction of clients that are malicious')

  def malicious(self, context: TransformContext) -> np.ndarray:
    # The attackers' own stream, so that they change no other draw of the run.
    seed = np.random.SeedSequence([context.seed, 0x61747461636B])  # 'attack'
    return attacks.malicious_clients(context.num_clients, self.fraction, seed)


@dataclasses.dataclass(frozen=True)
class SignFlipSettings(AttackSettings):
  scale: float = setting(1.0, positive(), 's: a malicious update is -s x delta')


@dataclasses.dataclass(frozen=True)
class ScalingSettings(AttackSettings):
  factor: float = setting(
    10.0, positive(), 'gamma: a malicious update is gamma x delta (model replacement: ~N/eta)'
  )


@dataclasses.dataclass(frozen=True)
class GaussianAttackSettings(AttackSettings):
  stddev: float = setting(1.0, positive(), 'sigma: a malicious update is N(0, sigma^2 I)')


@ATTACKS.register('none', NoSettings)
def no_attack(settings: NoSettings, context: TransformContext) -> None:
  """Every client honest."""
  return None


@ATTACKS.register('sign_flip', SignFlipSettings)
def sign_flip(settings: SignFlipSettings, context: TransformContext) -> UpdateTransform:
  """Malicious clients send -s x their update."""
  return attacks.sign_flip(settings.malicious(context), settings.scale)


@ATTACKS.register('scaling', ScalingSettings)
def scaling(settings: ScalingSettings, context: TransformContext) -> UpdateTransform:
  """Malicious clients send gamma x their update (Bagdasaryan et al. 2020's boosting)."""
  return attacks.scaling(settings.malicious(context), settings.factor)


@ATTACKS.register('gaussian', GaussianAttackSettings)
def gaussian(settings: GaussianAttackSettings, context: TransformContext) -> UpdateTransform:
  """Malicious clients send Gaussian noise (Blanchard et al. 2017)."""
  return attacks.gaussian_updates(settings.malicious(context), settings.stddev)


@dataclasses.dataclass(frozen=True)
class LabelFlipSettings(AttackSettings):
  # The build step flips the malicious clients' labels (`attacks.flip_labels`).
  poisons_labels: ClassVar[bool] = True


@ATTACKS.register('label_flip', LabelFlipSettings)
def label_flip(settings: LabelFlipSettings, context: TransformContext) -> None:
  """Malicious clients train on labels y -> C - 1 - y (their data is poisoned at build time;
  their updates are sent as computed)."""
  return None


# --- privacy -------------------------------------------------------------------------------


class Placement(StrEnum):
  """Where DP noise is added (`privacy.kwargs.placement`)."""

  CENTRAL = 'central'  # by the server, to the sum of clipped updates (DP-FedAvg)
  LOCAL = 'local'  # by each client, to its own clipped update


@dataclasses.dataclass(frozen=True)
class DpGaussianSettings(Settings):
  """Client-level DP with the Gaussian mechanism (McMahan et al. 2018; docs/privacy.md)."""

  clip_norm: float = setting(1.0, positive(), 'C: L2 norm each update is clipped to (initial C)')
  noise_multiplier: float = setting(
    1.0, positive(allow_zero=True), 'z: noise std is z x C (0: clipping only, epsilon infinite)'
  )
  placement: str = setting('central', one_of(Placement), "'central' (DP-FedAvg) or 'local'")
  expected_updates: int | None = setting(
    None,
    positive(integer=True, optional=True),
    "m: the fixed denominator, updates expected per aggregation (None: the algorithm's "
    'cohort_size or buffer_size)',
  )
  target_quantile: float | None = setting(
    None,
    number(above=0, below=1, optional=True),
    'gamma: adapt C to this quantile of update norms (Andrew et al. 2021); None: fixed C',
  )
  clip_learning_rate: float = setting(0.2, positive(), 'eta_C: adaptive clipping step')
  clipped_count_stddev: float | None = setting(
    None,
    positive(optional=True),
    'sigma_b: noise of the clipped count (None: m / 20, as Andrew et al. 2021)',
  )
  delta: float | None = setting(
    None, number(above=0, below=1, optional=True), 'delta of (epsilon, delta) (None: N^-1.1)'
  )
  accountant: str = setting('rdp', one_of(AccountantKind), "'rdp' or 'pld' (dp-accounting)")
  epsilon_budget: float | None = setting(
    None,
    positive(optional=True),
    'stop the run (status budget_exhausted) before an aggregation that would exceed it',
  )

  def check(self, prefix: str) -> None:
    if self.placement == Placement.LOCAL and self.target_quantile is not None:
      # Adaptive clipping releases the server's count of unclipped updates, which local DP's
      # per-client accounting does not cover.
      raise ConfigError(
        f'{prefix}target_quantile={self.target_quantile!r} is invalid with {prefix}placement='
        "'local'; allowed: adaptive clipping with placement='central', or target_quantile=None"
      )

  def denominator(self, context: TransformContext) -> int:
    m = self.expected_updates or context.updates_per_aggregation
    if m is None:
      raise ConfigError(
        'privacy.kwargs.expected_updates=None is invalid for an algorithm without cohort_size or '
        'buffer_size; allowed: the updates expected per aggregation (an integer >= 1)'
      )
    return m

  def adaptive(self, context: TransformContext) -> privacy.AdaptiveClipping | None:
    if self.target_quantile is None:
      return None
    m = self.denominator(context)
    stddev = m / 20.0 if self.clipped_count_stddev is None else self.clipped_count_stddev
    try:
      privacy.update_noise_multiplier(self.noise_multiplier, stddev)
    except ValueError as error:
      raise ConfigError(f'privacy.kwargs.{error}') from None
    return privacy.AdaptiveClipping(self.target_quantile, self.clip_learning_rate, stddev)

  def ledger(self, context: TransformContext) -> PrivacyLedger:
    """The accounting of this mechanism in the run `context` describes."""
    central = self.placement == Placement.CENTRAL
    delta = context.num_clients**-1.1 if self.delta is None else self.delta
    rate = min(1.0, self.denominator(context) / context.num_clients) if central else 1.0
    return PrivacyLedger(
      self.noise_multiplier, delta, AccountantKind(self.accountant), central, rate
    )


@PRIVACY.register('none', NoSettings)
def no_privacy(settings: NoSettings, context: TransformContext) -> None:
  """No clipping, no noise."""
  return None


@PRIVACY.register('dp_gaussian', DpGaussianSettings)
def dp_gaussian(settings: DpGaussianSettings, context: TransformContext) -> UpdateTransform:
  """Clipping to C and Gaussian noise of std z C: central (DP-FedAvg's fixed-denominator noised
  mean) or local; optionally adaptive clipping (Andrew et al. 2021)."""
  central = settings.placement == Placement.CENTRAL
  adaptive = settings.adaptive(context)
  denominator = settings.denominator(context) if central or adaptive else None
  return privacy.dp_gaussian(
    settings.clip_norm,
    settings.noise_multiplier,
    central=central,
    denominator=denominator,
    adaptive=adaptive,
  )


# --- compression ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QsgdSettings(Settings):
  levels: int = setting(16, positive(integer=True), 's: quantization levels per sign')

  def upload_bytes(self, num_params: int) -> int:
    return compression.qsgd_bytes(num_params, self.levels)


@dataclasses.dataclass(frozen=True)
class SparsifySettings(Settings):
  fraction: float = setting(0.01, _FRACTION, 'k / D: fraction of coordinates sent')
  error_feedback: bool = setting(True, boolean, 'carry what was not sent to the next update')

  def held_models(self, num_clients: int) -> list[tuple[str, float, str]]:
    """Model-sized arrays the transform keeps (for the memory estimate): (setting, copies,
    what)."""
    if not self.error_feedback:
      return []
    return [('compression.kwargs.error_feedback=True', num_clients, 'error-feedback residuals')]


@dataclasses.dataclass(frozen=True)
class TopKSettings(SparsifySettings):
  def upload_bytes(self, num_params: int) -> int:
    return compression.top_k_bytes(num_params, self.fraction)


@dataclasses.dataclass(frozen=True)
class RandomKSettings(SparsifySettings):
  def upload_bytes(self, num_params: int) -> int:
    return compression.random_k_bytes(num_params, self.fraction)


@dataclasses.dataclass(frozen=True)
class NoCompressionSettings(Settings):
  def upload_bytes(self, num_params: int) -> int:
    return compression.dense_bytes(num_params)


@COMPRESSORS.register('none', NoCompressionSettings)
def no_compression(settings: NoCompressionSettings, context: TransformContext) -> None:
  """Updates sent as float32 values."""
  return None


@COMPRESSORS.register('qsgd', QsgdSettings)
def qsgd(settings: QsgdSettings, context: TransformContext) -> UpdateTransform:
  """QSGD stochastic quantization (Alistarh et al. 2017)."""
  return compression.qsgd(settings.levels)


@COMPRESSORS.register('top_k', TopKSettings)
def top_k(settings: TopKSettings, context: TransformContext) -> UpdateTransform:
  """Top-k sparsification, with error feedback by default."""
  return compression.top_k(settings.fraction, error_feedback=settings.error_feedback)


@COMPRESSORS.register('random_k', RandomKSettings)
def random_k(settings: RandomKSettings, context: TransformContext) -> UpdateTransform:
  """Random-k sparsification, with error feedback by default."""
  return compression.random_k(settings.fraction, error_feedback=settings.error_feedback)


# --- robust aggregation --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrimmedMeanSettings(Settings):
  beta: float = setting(0.1, number(minimum=0, below=0.5), 'fraction trimmed at each end')


@dataclasses.dataclass(frozen=True)
class KrumSettings(Settings):
  num_byzantine: int = setting(
    1, positive(integer=True, allow_zero=True), 'f: Byzantine updates tolerated'
  )

  def check_batch(self, context: TransformContext, name: str) -> None:
    needed = 2 * self.num_byzantine + 3
    have = context.updates_per_aggregation
    if have is None or have < needed:
      got = 'no fixed number' if have is None else f'{have}'
      raise ConfigError(
        f'robust.name={name!r} with robust.kwargs.num_byzantine={self.num_byzantine} needs at '
        f'least 2f + 3 = {needed} updates per aggregation, and the algorithm aggregates {got}; '
        'allowed: a smaller num_byzantine, or a larger cohort_size / buffer_size'
      )


@dataclasses.dataclass(frozen=True)
class MultiKrumSettings(KrumSettings):
  num_selected: int = setting(5, positive(integer=True), 'm: lowest-scoring updates averaged')


@dataclasses.dataclass(frozen=True)
class NormBoundingSettings(Settings):
  bounds_sensitivity: ClassVar[bool] = True  # each update bounded before the algorithm's mean
  max_norm: float = setting(1.0, positive(), 'M: L2 norm each update is clipped to')


@dataclasses.dataclass(frozen=True)
class CenteredClippingSettings(Settings):
  radius: float = setting(1.0, positive(), 'tau: clipping radius around the last aggregate')
  iterations: int = setting(1, positive(integer=True), 'L: clipping iterations per batch')


@dataclasses.dataclass(frozen=True)
class MeanSettings(Settings):
  # Central DP noise keeps the sensitivity C / m it is calibrated to after this aggregator.
  bounds_sensitivity: ClassVar[bool] = True


@ROBUST_AGGREGATORS.register('mean', MeanSettings)
def mean(settings: MeanSettings, context: TransformContext) -> None:
  """The algorithm's own (non-robust) reduction."""
  return None


@ROBUST_AGGREGATORS.register('median', NoSettings)
def median(settings: NoSettings, context: TransformContext) -> UpdateTransform:
  """Coordinate-wise median (Yin et al. 2018)."""
  return robust.median()


@ROBUST_AGGREGATORS.register('trimmed_mean', TrimmedMeanSettings)
def trimmed_mean(settings: TrimmedMeanSettings, context: TransformContext) -> UpdateTransform:
  """Coordinate-wise beta-trimmed mean (Yin et al. 2018)."""
  return robust.trimmed_mean(settings.beta)


@ROBUST_AGGREGATORS.register('krum', KrumSettings)
def krum(settings: KrumSettings, context: TransformContext) -> UpdateTransform:
  """Krum (Blanchard et al. 2017)."""
  settings.check_batch(context, 'krum')
  return robust.multi_krum(settings.num_byzantine, 1)


@ROBUST_AGGREGATORS.register('multi_krum', MultiKrumSettings)
def multi_krum(settings: MultiKrumSettings, context: TransformContext) -> UpdateTransform:
  """Multi-Krum (Blanchard et al. 2017): the mean of the m best-scored updates."""
  settings.check_batch(context, 'multi_krum')
  return robust.multi_krum(settings.num_byzantine, settings.num_selected)


@ROBUST_AGGREGATORS.register('norm_bounding', NormBoundingSettings)
def norm_bounding(settings: NormBoundingSettings, context: TransformContext) -> UpdateTransform:
  """Each update clipped to norm M (Sun et al. 2019)."""
  return robust.norm_bounding(settings.max_norm)


@ROBUST_AGGREGATORS.register('centered_clipping', CenteredClippingSettings)
def centered_clipping(
  settings: CenteredClippingSettings, context: TransformContext
) -> UpdateTransform:
  """Centered clipping around the last aggregate (Karimireddy et al. 2021)."""
  return robust.centered_clipping(settings.radius, settings.iterations)


def check_combination(selections: dict[str, Selection]) -> None:
  """Refuses (`ConfigError`) transforms that make no sense together."""
  privacy_settings = selections['privacy'].settings
  robust_name = selections['robust'].name
  if (
    isinstance(privacy_settings, DpGaussianSettings)
    and privacy_settings.placement == Placement.CENTRAL
    and not getattr(selections['robust'].settings, 'bounds_sensitivity', False)
  ):
    raise ConfigError(
      f"privacy.kwargs.placement='central' is invalid with robust.name={robust_name!r}: central "
      "noise is calibrated to the clipped mean's sensitivity C / m, which that aggregator does "
      "not have; allowed: robust.name 'mean' or 'norm_bounding', or placement='local'"
    )


def build_transform(
  selections: dict[str, Selection], context: TransformContext
) -> UpdateTransform | None:
  """The chain of the selected transforms in the order updates travel, or None when every
  section selects its no-op. Raises `ConfigError` for a combination that makes no sense."""
  check_combination(selections)
  privacy_selection = selections['privacy']
  central = (
    isinstance(privacy_selection.settings, DpGaussianSettings)
    and privacy_selection.settings.placement == Placement.CENTRAL
  )
  order = ['attack', *([] if central else ['privacy']), 'compression', 'robust']
  order += ['privacy'] if central else []
  transforms = []
  for section in order:
    selection = selections[section]
    built = SECTIONS[section].get(selection.name).factory(selection.settings, context)
    if built is not None:
      transforms.append(built)
  return chain(*transforms) if transforms else None


def upload_bytes(selection: Selection, num_params: int) -> int:
  """Bytes of one update under the `compression` section `selection` (float32 values when its
  settings do not say)."""
  size = getattr(selection.settings, 'upload_bytes', None)
  return compression.dense_bytes(num_params) if size is None else int(size(num_params))


def privacy_monitor(selection: Selection, context: TransformContext) -> PrivacyMonitor | None:
  """The accounting and budget of the `privacy` section `selection`, or None without DP."""
  settings = selection.settings
  if not isinstance(settings, DpGaussianSettings):
    return None
  return PrivacyMonitor(settings.ledger(context), settings.epsilon_budget)


def malicious_clients(selection: Selection, context: TransformContext) -> np.ndarray | None:
  """`[num_clients]` bool of the `attack` section's malicious clients, or None."""
  settings = selection.settings
  return settings.malicious(context) if isinstance(settings, AttackSettings) else None
