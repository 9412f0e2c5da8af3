"""FedASMU (Liu et al. 2024) and its ablations, as registered: Formulas 1-3 replayed by hand on
a run, and each ablation equal to FedASMU with exactly the rule it ablates switched off (no
fetch: -FA; a static alpha: -DA; neither: -0, which is FedAsync with a staleness bound,
tests/strategy/test_fedasmu.py; a fixed fetch slot: -H1/H2/H3)."""

import math

import numpy as np
import pytest

from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered

# Each local step is one "epoch" of the fetch (client.local_steps = L = 4): the fixed slots are
# l* = 1 (H1, after the first), 2 (H2, the middle) and 3 (H3, the last but one).
TRIGGER = {'trigger_period': 0.7, 'trigger_count': 3, 'concurrency': 3}
# Formula 2 with lambda = 0: xi = iota = 1 and alpha = xi / (1 + xi) = 1/2, never updated.
CONSTANT_ALPHA = {
  'lambda_0': 0.0,
  'iota_0': 1.0,
  'lambda_learning_rate': 0.0,
  'sigma_learning_rate': 0.0,
  'iota_learning_rate': 0.0,
}
# FedAsync's static alpha with s = 1: the same 1/2.
STATIC_HALF = {'alpha': 0.5, 'staleness': 'constant'}


def _config(algorithm, **kwargs):
  config = registered.config(algorithm, **TRIGGER, **kwargs)
  config.client.local_steps = 4
  return config


def _run(algorithm, versions=8, **kwargs):
  return registered.run(_config(algorithm, **kwargs), versions)


def test_formulas_1_to_3_replayed_by_hand():
  # Without a fetch (FedASMU-FA), for device i's upload w' downloaded at version o, aggregated
  # at version t with s = t - o + 1:
  #   xi = lambda_i / (sqrt(max(t, 1)) s^sigma_i) + iota_i, alpha = xi / (1 + xi)   (2)
  #   w <- (1 - alpha) w + alpha w'                                                  (1)
  #   g = (w' - w_new) . (w' - w_old) / (eta L) and the chain rule through alpha      (3)
  rates = {'lambda_learning_rate': 0.05, 'sigma_learning_rate': 0.03, 'iota_learning_rate': 0.02}
  config = _config('fedasmu_fa', **rates)
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  params = registered.to_numpy(sim.params)
  sim.run(StopCondition(max_versions=12))
  lam, sigma, iota = (np.full(registered.FED.num_clients, x) for x in (1.0, 0.5, 0.1))
  stale = 0
  for version, aggregation in enumerate(recorded):
    batch = aggregation.batch
    (row,) = np.flatnonzero(aggregation.real)
    i, s = int(batch.client_id[row]), int(batch.staleness[row]) + 1
    stale += s > 1
    d_lambda = 1 / (math.sqrt(max(version, 1)) * s ** sigma[i])
    xi = lam[i] * d_lambda + iota[i]
    alpha = xi / (1 + xi)
    client = registered.rows(batch.client_params, row)
    new = registered.mix(params, alpha, client)
    estimate = registered.tree_vdot(
      registered.plus(client, -1.0, new), registered.plus(client, -1.0, params)
    ) / (config.client.learning_rate * int(batch.num_steps[row]))
    d_alpha = estimate / (1 + xi) ** 2  # the estimate times d alpha / d xi
    lam[i], sigma[i], iota[i] = (
      lam[i] - 0.05 * d_alpha * d_lambda,
      sigma[i] + 0.03 * d_alpha * lam[i] * math.log(s) * d_lambda,
      iota[i] - 0.02 * d_alpha,
    )
    params = new
  assert stale > 0
  registered.assert_trees_close(sim.params, params, atol=1e-5)
  state = sim.server_state
  for name, expected in (('lam', lam), ('sigma', sigma), ('iota', iota)):
    np.testing.assert_allclose(getattr(state, name), expected, rtol=1e-5, err_msg=name)
  assert np.abs(lam - 1.0).max() > 1e-4  # Formula 3 did move the controls


def test_fedasmu_fa_is_fedasmu_without_the_fetch():
  registered.assert_trees_equal(
    _run('fedasmu_fa').params, _run('fedasmu', fetch_policy='none').params
  )


@pytest.mark.parametrize('variant, fetch_step', [('h1', 1), ('h2', 2), ('h3', 3)])
def test_fixed_slot_variants_are_fedasmu_fetching_after_that_epoch(variant, fetch_step):
  sim = registered.simulation(_config(f'fedasmu_{variant}'))
  segments = []
  dispatch = sim.dispatch
  sim.dispatch = lambda *args, **kwargs: segments.append(dispatch(*args, **kwargs)) or segments[-1]
  sim.run(StopCondition(max_versions=8))
  # Every task is split after step l*: a first segment of l* steps, the rest after the fetch.
  firsts = [h.num_steps for h in segments if h.intermediate]
  seconds = [h.num_steps for h in segments if not h.intermediate]
  assert firsts and set(firsts) == {fetch_step} and set(seconds) == {4 - fetch_step}
  assert sim.scheduler.blends > 0
  registered.assert_trees_equal(sim.params, _run('fedasmu', fetch_policy=variant).params)


def test_fedasmu_da_is_fedasmu_with_a_static_alpha():
  # Same fetch (H2), same alpha 1/2 for every upload: the static rule of -DA, or FedASMU's
  # Formula 2 held at 1/2 (lambda = 0, iota = 1, no Formula 3 steps).
  da = _run('fedasmu_da', fetch_policy='h2', **STATIC_HALF)
  full = _run('fedasmu', fetch_policy='h2', **CONSTANT_ALPHA)
  registered.assert_trees_close(da.params, full.params, atol=1e-7)
  # With its default dynamic alpha FedASMU is another model.
  assert registered.max_difference(_run('fedasmu', fetch_policy='h2').params, da.params) > 1e-3


def test_fedasmu_0_is_fedasmu_fa_with_a_static_alpha():
  registered.assert_trees_close(
    _run('fedasmu_0', **STATIC_HALF).params,
    _run('fedasmu_fa', **CONSTANT_ALPHA).params,
    atol=1e-7,
  )
