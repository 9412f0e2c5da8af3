"""The straggler paper's algorithms default to the paper's values (docs/fidelity.md, Section 2):
FARe-DUST's FedAdam is App. G.1's (G.3), FeAST-on-MSG's eta_g is Table 18's, both sum
uniformly, and FedDyn averages with Algorithm 1's 1 / |P_t|."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax import algorithms
from fedsim_jax.runtime import UpdateBatch
from fedsim_jax.strategy import server_update
from fedsim_jax.strategy.server_optimizers import server_optimizer

FACTS = algorithms.RunFacts(num_clients=4, local_steps=2)
SIZES = np.array([4, 6, 8, 10])


def _build(name, **kwargs):
  settings = algorithms.resolve_settings(name, {'cohort_size': 2, **kwargs}, FACTS)
  return algorithms.build(settings, algorithms.BuildContext(name, FACTS, SIZES))


def _batch():
  deltas = {'w': jnp.array([[0.5, 0.2], [0.1, -0.3], [1e6, 1e6]])}  # the last row: padding
  return UpdateBatch(
    deltas=deltas,
    weights=jnp.array([1.0, 1.0, 0.0]),
    staleness=jnp.zeros(3, jnp.int32),
    num_steps=jnp.array([2, 2, 0], jnp.int32),
    group=jnp.zeros(3, jnp.int32),
  )


def _params_after(aggregator, params):
  state = aggregator.apply(aggregator.init(params), _batch())
  return state.params


def test_fare_dust_defaults_to_table_11s_fedadam():
  # G.3: "FARE-DUST was used in conjunction with the FedAdam server optimizer. Default values
  # for FedAdam from Appendix G.1 were used"; Table 11 (EMNIST): eta_g 0.003, beta_1 0.9,
  # beta_2 0.99, epsilon 1e-4.
  fare = algorithms.get_spec('fare_dust').settings()
  assert fare.server_optimizer == 'adam'
  assert (fare.server_learning_rate, fare.b1, fare.b2, fare.eps) == (0.003, 0.9, 0.99, 1e-4)
  assert fare.teacher_learning_rate is None  # the same eta_g as the server's (Alg. 1 line 7)


def test_fare_dust_server_and_teacher_use_the_default_eta_g():
  algorithm = _build('fare_dust', ema_decay=0.0)
  params = {'w': jnp.array([1.0, -1.0])}
  reference = server_update(server_optimizer('adam', 0.003, b1=0.9, b2=0.99, eps=1e-4))
  got = _params_after(algorithm.aggregator, params)
  want = _params_after(reference, params)
  for x, y in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert algorithm.scheduler.teacher_learning_rate == 0.003
  # An explicit teacher rate leaves the server's alone; a server rate carries to the teacher.
  assert _build('fare_dust', teacher_learning_rate=0.5).scheduler.teacher_learning_rate == 0.5
  assert _build('fare_dust', server_learning_rate=0.02).scheduler.teacher_learning_rate == 0.02


def test_fedadam_keeps_its_own_defaults():
  # FARe-DUST's override is its own: fedadam stays on Reddi et al.'s ~10^-2 and tau = 1e-3.
  fedadam = algorithms.get_spec('fedadam').settings()
  assert (fedadam.server_learning_rate, fedadam.eps) == (0.01, 1e-3)


def test_feast_msg_defaults_to_table_18():
  # Table 18, EMNIST per-example: eta_g 0.006, beta 0.95, kappa 0; App. G.4: tau_max 100,000 s.
  feast = algorithms.get_spec('feast_msg').settings()
  assert feast.server_learning_rate == 0.006
  assert (feast.ema_decay, feast.kappa, feast.tau_max) == (0.95, 0.0, 1e5)


def test_feast_msg_global_step_is_the_default_eta_g_times_the_mean_delta():
  # Alg. 2 line 10 (the code's sign): w + (eta_g / b_t) sum of the two real deltas.
  algorithm = _build('feast_msg')
  got = _params_after(algorithm.aggregator, {'w': jnp.array([1.0, -1.0])})
  np.testing.assert_allclose(got['w'], [1.0 + 0.006 * 0.3, -1.0 + 0.006 * -0.05], rtol=1e-6, atol=0)


@pytest.mark.parametrize('name', ['feddyn', 'fare_dust', 'feast_msg'])
def test_papers_with_unweighted_sums_default_to_uniform_weighting(name):
  # FedDyn Alg. 1: theta^t = (1 / |P_t|) sum theta_k^t; straggler paper, Alg. 1 line 15 and
  # Alg. 2 line 10: (eta_g / B) times the plain sum of the deltas.
  assert algorithms.get_spec(name).settings().weighting == 'uniform'
  assert _build(name).scheduler.rounds.weighting == 'uniform'


def test_other_synchronous_algorithms_keep_example_weighting():
  assert algorithms.get_spec('fedavg').settings().weighting == 'num_examples'
