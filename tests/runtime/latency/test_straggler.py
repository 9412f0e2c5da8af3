"""Log-normal latency of Hard et al. (straggler paper, Tables 1 and 2)."""

import math

import numpy as np
import pytest

from fedsim_jax.runtime.latency.straggler import (
  PAPER_TABLES,
  LogNormalLatency,
  closed_form_means,
  lognormal_mean,
)

NUM_DRAWS = 200_000
EXAMPLES_PER_STEP = 20
STEPS = 5  # one epoch of 100 examples


def _model(model, seed=0, **kwargs):
  mask = np.array([False, True])
  return LogNormalLatency(
    2,
    np.random.default_rng(seed),
    examples_per_step=EXAMPLES_PER_STEP,
    straggler_mask=mask,
    model=model,
    **kwargs,
  )


def _check_means(model, client, draws):
  means = model.mean_factors(model.group(client))
  np.testing.assert_allclose(np.mean(draws.communication), means['communication'], rtol=0.01)
  np.testing.assert_allclose(np.mean(draws.overhead), means['overhead'], rtol=0.01)
  np.testing.assert_allclose(
    np.mean(draws.per_step) / EXAMPLES_PER_STEP, means['per_example'], rtol=0.01
  )
  epoch = np.mean(draws.duration(STEPS))
  np.testing.assert_allclose(
    epoch, model.expected_duration(client, STEPS * EXAMPLES_PER_STEP), rtol=0.01
  )


@pytest.mark.parametrize('variant', ['per_example', 'per_domain_per_example'])
@pytest.mark.parametrize('client', [0, 1])
def test_sample_many_means_match_closed_form(variant, client):
  model = _model(variant)
  _check_means(model, client, model.sample_many(np.full(NUM_DRAWS, client)))


def test_per_task_sample_means_match_closed_form():
  # The per-task path (one call per dispatched task), slower group of the slower model.
  model = _model('per_domain_per_example', seed=1)
  draws = [model.sample(1) for _ in range(NUM_DRAWS)]
  columns = type(draws[0])(*(np.array(c) for c in zip(*draws)))
  _check_means(model, 1, columns)


def test_paper_tables_and_closed_form():
  means = closed_form_means('per_domain_per_example')
  assert means['straggler']['communication'] == pytest.approx(math.exp(3.7 + 0.5))
  assert means['standard']['per_example'] == pytest.approx(math.exp(-2.0 + 0.02))
  assert PAPER_TABLES['per_example']['standard']['per_example'] == (-1.6, 0.5)
  model = _model('per_example')
  assert model.mean_factors('straggler') == model.mean_factors('standard')
  assert model.expected_step_time(0) == pytest.approx(EXAMPLES_PER_STEP * math.exp(-1.6 + 0.125))
  assert lognormal_mean(0.0, 0.0) == 1.0


def test_override_one_entry():
  model = _model('per_domain_per_example', params={'straggler': {'communication': (4.0, 0.5)}})
  assert model.params['straggler']['communication'] == (4.0, 0.5)
  assert model.params['straggler']['overhead'] == (3.5, 0.3)
  assert model.params['standard'] == PAPER_TABLES['per_domain_per_example']['standard']


def test_zero_sigma_is_deterministic_and_task_duration_formula():
  zero = {
    g: {f: (0.0, 0.0) for f in ('communication', 'overhead', 'per_example')}
    for g in ('standard', 'straggler')
  }
  model = _model('per_example', params=zero)
  task = model.sample(0)
  assert task == (1.0, 1.0, float(EXAMPLES_PER_STEP))
  assert task.duration(STEPS) == 2.0 + STEPS * EXAMPLES_PER_STEP


def test_same_seed_same_draws():
  a, b = _model('per_domain_per_example', seed=7), _model('per_domain_per_example', seed=7)
  assert [a.sample(i % 2) for i in range(50)] == [b.sample(i % 2) for i in range(50)]
  c = _model('per_domain_per_example', seed=8)
  assert a.sample(0) != c.sample(0)


def test_per_client_examples_per_step():
  model = LogNormalLatency(3, np.random.default_rng(0), examples_per_step=np.array([1, 10, 32]))
  np.testing.assert_allclose(
    [model.expected_step_time(i) for i in range(3)], np.array([1, 10, 32]) * math.exp(-1.6 + 0.125)
  )


@pytest.mark.parametrize(
  'kwargs,match',
  [
    ({'model': 'per_domain'}, 'latency.kwargs.model'),
    ({'examples_per_step': 0}, 'latency.examples_per_step'),
    ({'examples_per_step': np.array([1, 2])}, 'latency.examples_per_step'),
    ({'examples_per_step': 2.5}, 'latency.examples_per_step'),
    ({'straggler_mask': np.array([1, 0, 0])}, 'latency.straggler_mask'),
    ({'straggler_mask': np.array([True])}, 'latency.straggler_mask'),
    ({'params': {'slow': {}}}, 'latency.kwargs.params'),
    ({'params': {'standard': {'compute': (0, 1)}}}, 'latency.kwargs.params'),
    ({'params': {'standard': {'overhead': (0, -1)}}}, 'latency.kwargs.params.standard.overhead'),
    ({'params': {'standard': {'overhead': 3}}}, 'latency.kwargs.params.standard.overhead'),
  ],
)
def test_invalid_settings(kwargs, match):
  settings = {'examples_per_step': 4, **kwargs}
  with pytest.raises(ValueError, match=match):
    LogNormalLatency(3, np.random.default_rng(0), **settings)


def test_per_domain_requires_mask():
  with pytest.raises(ValueError, match='latency.straggler_mask'):
    LogNormalLatency(
      3, np.random.default_rng(0), examples_per_step=4, model='per_domain_per_example'
    )


def test_invalid_num_clients_and_rng():
  with pytest.raises(ValueError, match='latency.num_clients'):
    LogNormalLatency(0, np.random.default_rng(0), examples_per_step=4)
  with pytest.raises(ValueError, match='latency.rng'):
    LogNormalLatency(2, 0, examples_per_step=4)
