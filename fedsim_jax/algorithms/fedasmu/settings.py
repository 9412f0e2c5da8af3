"""The settings of FedASMU (Liu et al. 2024) and its ablations, one dataclass checked in one
place: the periodic trigger (Alg. 1 lines 1-6), dynamic staleness-aware aggregation (Formulas
1-3) on the server, and the fresh-model fetch (Formulas 7-9) at a time slot l* chosen by an
LSTM + REINFORCE meta-model and per-device Q-tables (Formulas 5-6, Alg. 2).

Variants (Sec. 5's ablation, Fig. 2, and the appendix's time-slot heuristics): `fedasmu`,
`fedasmu_da` (static alpha, with the fetch), `fedasmu_fa` (dynamic alpha, no fetch), `fedasmu_0`
(neither), `fedasmu_h1`..`h3` (fixed fetch slots). Defaults: Table 5's LeNet/FMNIST values
where the paper states them; the other choices are documented in server.py and fetch.py
beside this module, each a setting here. The server, the scheduler and the fetch policy read
these settings as they are: nothing below checks them again.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.algorithms.base import RunFacts
from fedsim_jax.algorithms.fedasmu.fetch import (
  BASELINE_SCOPES,
  FETCH_POLICIES,
  FIXED_FETCH_PRESETS,
  HAZARD_PRIORS,
  META_EXPLOITS,
  META_FEATURES,
  Q_BOOTSTRAPS,
  FetchChoice,
  FetchPolicy,
  FixedFetch,
  LearnedFetch,
)
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  SlotSettings,
  StalenessSettings,
)
from fedsim_jax.client import ClientOptimizer
from fedsim_jax.settings import (
  Check,
  ConfigError,
  number,
  one_of,
  positive,
  setting,
  text,
)
from fedsim_jax.str_enum import StrEnum


class XiForm(StrEnum):
  """Formula 2's form (`algorithm.kwargs.xi_form`; server.py's docstring)."""

  APPENDIX = 'appendix'
  PRINTED = 'printed'


class SigmaGradient(StrEnum):
  """The sigma hyper-gradient (`algorithm.kwargs.sigma_gradient`)."""

  EXACT = 'exact'
  PRINTED = 'printed'


class GradientSign(StrEnum):
  """The sign of the gradient estimate (`algorithm.kwargs.gradient_sign`)."""

  PRINTED = 'printed'
  DESCENT = 'descent'


class StaticAlpha(StrEnum):
  """FedASMU-DA/-0's alpha (`algorithm.kwargs.static_alpha`)."""

  FEDASYNC = 'fedasync'
  FROZEN = 'frozen'


XI_FORMS = tuple(form.value for form in XiForm)
SIGMA_GRADIENTS = tuple(form.value for form in SigmaGradient)
GRADIENT_SIGNS = tuple(sign.value for sign in GradientSign)
STATIC_ALPHAS = tuple(rule.value for rule in StaticAlpha)

# Variant -> (dynamic aggregation, fetch policy; None: the `fetch_policy` setting).
VARIANTS: dict[str, tuple[bool, str | None]] = {
  'fedasmu': (True, None),
  'fedasmu_da': (False, None),
  'fedasmu_fa': (True, 'none'),
  'fedasmu_0': (False, 'none'),
  'fedasmu_h1': (True, 'h1'),
  'fedasmu_h2': (True, 'h2'),
  'fedasmu_h3': (True, 'h3'),
}


def _features(name: str, value) -> None:
  if (
    not isinstance(value, tuple)
    or not value
    or len(set(value)) != len(value)
    or not set(value) <= set(META_FEATURES)
  ):
    raise ConfigError(
      f'{name}={value!r} is invalid; allowed values: a non-empty tuple of distinct names from '
      f'{list(META_FEATURES)}'
    )


_RATE: Check = positive(allow_zero=True)


@dataclasses.dataclass(frozen=True)
class FedasmuSettings(
  SlotSettings,
  LocalWorkSettings,
  StalenessSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  # Server: Formulas 1-3.
  tau: int = setting(99, positive(integer=True), 'discard uploads with staleness t - o + 1 > tau')
  alpha: float = setting(0.9, number(above=0, maximum=1), "fedasmu_da/_0: FedAsync's alpha")
  static_alpha: str = setting('fedasync', one_of(STATIC_ALPHAS), "alpha s(t - o), or 'frozen'")
  lambda_learning_rate: float = setting(1e-4, _RATE, 'eta_lambda (Formula 3)')
  sigma_learning_rate: float = setting(1e-4, _RATE, 'eta_sigma')
  iota_learning_rate: float = setting(1e-4, _RATE, 'eta_iota')
  mu_alpha: float = setting(1.0, positive(), 'mu_alpha (Formula 2; not stated)')
  lambda_0: float = setting(1.0, positive(allow_zero=True), 'initial lambda (not stated)')
  sigma_0: float = setting(0.5, number(), 'initial sigma (not stated)')
  iota_0: float = setting(0.1, positive(allow_zero=True), 'initial iota (not stated)')
  alpha_min: float = setting(0.001, number(above=0, below=1), 'alpha is projected on [a, 1)')
  min_version: float = setting(1.0, positive(), 'Formula 2 uses sqrt(max(t, min_version))')
  xi_form: str = setting('appendix', one_of(XI_FORMS), 'lambda / (sqrt(t) s^sigma) + iota')
  sigma_gradient: str = setting('exact', one_of(SIGMA_GRADIENTS), "or the appendix's ln sigma")
  gradient_sign: str = setting('printed', one_of(GRADIENT_SIGNS), "g ~ (w' - w_o) / (eta L)")
  sigma_min: float = setting(0.001, positive(), 'sigma >= sigma_min with the printed forms')
  # Devices: the blend of Formulas 7-9.
  gamma_learning_rate: float = setting(1e-4, _RATE, 'eta_gamma (Formula 9)')
  v_learning_rate: float = setting(1e-4, _RATE, 'eta_v')
  mu_beta: float = setting(1.0, positive(), 'mu_beta (Formula 8; not stated)')
  gamma_0: float = setting(1.0, positive(allow_zero=True), 'initial gamma (not stated)')
  v_0: float = setting(1.0, number(), 'initial v (not stated)')
  # The fetch time slot: Formulas 5-6, Alg. 2 (only eta_RL is stated).
  fetch_policy: str = setting(
    'learned', one_of(FETCH_POLICIES), "meta LSTM + Q-tables; 'h1'-'h3' fixed; 'none'"
  )
  fetch_hidden_size: int = setting(35, positive(integer=True), 'meta model theta: LSTM width')
  fetch_features: tuple = setting(META_FEATURES, _features, "theta's inputs at epoch l")
  fetch_hazard_prior: str = setting('uniform', one_of(HAZARD_PRIORS), "untrained theta's slots")
  fetch_pretrain_history: str | None = setting(
    None, text(optional=True), 'an .npz of earlier fetches: theta\'s "historical data"'
  )
  fetch_pretrain_passes: int = setting(1, positive(integer=True), 'passes over that history')
  fetch_learning_rate: float = setting(0.001, positive(), 'eta_RL (Formula 5, Tables 5-6)')
  fetch_baseline_decay: float = setting(
    0.05, number(above=0, maximum=1), 'rho: b <- (1 - rho) b + rho R (Alg. 2 line 13)'
  )
  fetch_baseline_init: float = setting(0.0, number(), 'b_0')
  fetch_baseline_scope: str = setting('all', one_of(BASELINE_SCOPES), 'rewards moving b')
  fetch_epsilon: float = setting(0.1, number(minimum=0, maximum=1), 'epsilon-greedy epsilon')
  fetch_meta_exploit: str = setting('sample', one_of(META_EXPLOITS), "theta's greedy branch")
  fetch_q_learning_rate: float = setting(0.1, number(above=0, maximum=1), 'phi (Formula 6)')
  fetch_q_discount: float = setting(0.9, number(minimum=0, below=1), 'psi (Formula 6)')
  fetch_q_bootstrap: str = setting(
    'same', one_of(Q_BOOTSTRAPS), "max_a H(l*, a) in the same state (as printed) or 'next'"
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.lambda_0 + self.iota_0 <= 0:
      raise ConfigError(
        f'{prefix}lambda_0={self.lambda_0!r} / {prefix}iota_0={self.iota_0!r} are invalid; '
        'allowed values: numbers >= 0 with lambda_0 + iota_0 > 0'
      )
    if self.sigma_gradient == SigmaGradient.PRINTED and self.xi_form != XiForm.APPENDIX:
      raise ConfigError(
        f"{prefix}sigma_gradient='printed' is invalid with {prefix}xi_form={self.xi_form!r}; "
        "allowed values: 'exact' (or xi_form='appendix')"
      )
    if self.uses_positive_sigma:
      number(minimum=self.sigma_min)(f'{prefix}sigma_0', self.sigma_0)

  @property
  def uses_positive_sigma(self) -> bool:
    return self.xi_form == XiForm.PRINTED or self.sigma_gradient == SigmaGradient.PRINTED

  def dynamic_of(self, name: str) -> bool:
    """Whether variant `name` learns alpha (Formulas 2-3) or uses the static rule."""
    return VARIANTS[name][0]

  def fetch_policy_of(self, name: str) -> str:
    """The fetch policy variant `name` uses: 'none', 'learned', 'h1', 'h2' or 'h3'."""
    return VARIANTS[name][1] or self.fetch_policy

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if self.trigger_period is None:
      raise ConfigError(
        f'{prefix}trigger_period=None is invalid with algorithm.name={name!r} (Alg. 1 triggers '
        'devices periodically; Table 5: 10); allowed values: a number > 0'
      )
    if self.max_staleness is not None:
      raise ConfigError(
        f'{prefix}max_staleness={self.max_staleness!r} is invalid with algorithm.name='
        f'{name!r} (it reads {prefix}tau); allowed values: None'
      )
    if self.fetch_policy_of(name) == FetchChoice.NONE:
      return
    # With a fetch: Formula 4's plain SGD, split at a local epoch.
    if run.client_optimizer != ClientOptimizer.SGD:
      raise ConfigError(
        f'client.optimizer={run.client_optimizer!r} is invalid with algorithm.name={name!r} '
        '(local training is split at the fetch and an optimizer state would restart); allowed '
        "values: 'sgd'"
      )
    for field in ('proximal_strength', 'distillation_strength'):
      if getattr(self, field) != 0:
        raise ConfigError(
          f'{prefix}{field}={getattr(self, field)!r} is invalid with algorithm.name={name!r} '
          '(devices train Formula 4); allowed values: 0'
        )
    if self.time_limit is not None or self.time_limit_percentile is not None:
      raise ConfigError(
        f'{prefix}time_limit is invalid with algorithm.name={name!r} (the fetch follows a '
        'local epoch); allowed values: None'
      )
    if run.local_steps is not None and run.local_steps < 2:
      raise ConfigError(
        f'client.local_steps={run.local_steps!r} is invalid with algorithm.name={name!r} (the '
        'fetch follows a step 1..L-1); allowed values: an integer >= 2'
      )
    epochs = run.local_epochs
    if epochs is not None and not (float(epochs).is_integer() and epochs >= 2):
      raise ConfigError(
        f'client.local_epochs={epochs!r} is invalid with algorithm.name={name!r} (the fetch '
        'follows an epoch 1..L-1); allowed values: an integer >= 2'
      )

  def make_fetch_policy(self, name: str, num_clients: int, seed: int) -> FetchPolicy | None:
    """Variant `name`'s fetch policy; the learned one seeded from `seed` (its own stream)."""
    policy = self.fetch_policy_of(name)
    if policy == FetchChoice.NONE:
      return None
    if policy in FIXED_FETCH_PRESETS:
      return FixedFetch.preset(policy)
    return LearnedFetch(
      num_clients,
      int(np.random.SeedSequence([seed, 0xA5F37C]).generate_state(1)[0]),
      hidden_size=self.fetch_hidden_size,
      features=tuple(self.fetch_features),
      hazard_prior=self.fetch_hazard_prior,
      learning_rate=self.fetch_learning_rate,
      baseline_decay=self.fetch_baseline_decay,
      baseline_init=self.fetch_baseline_init,
      baseline_scope=self.fetch_baseline_scope,
      epsilon=self.fetch_epsilon,
      meta_exploit=self.fetch_meta_exploit,
      q_learning_rate=self.fetch_q_learning_rate,
      q_discount=self.fetch_q_discount,
      q_bootstrap=self.fetch_q_bootstrap,
      pretrain_history=self.fetch_pretrain_history,
      pretrain_passes=self.fetch_pretrain_passes,
    )
