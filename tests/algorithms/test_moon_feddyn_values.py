"""MOON (Li, He and Song 2021) and FedDyn (Acar et al. 2021), as registered: the degenerate cases
in which each reduces to FedAvg or FedProx."""

from tests.algorithms import registered
from tests.algorithms.registered import FED


class TestMoon:
  def test_mu_zero_is_fedavg_bit_for_bit(self):
    moon = registered.run(registered.config('moon', mu=0.0), versions=3)
    registered.assert_trees_equal(
      moon.params, registered.run(registered.config('fedavg'), 3).params
    )

  def test_a_first_participation_contrasts_nothing_and_a_later_one_does(self):
    # Every client's first task has previous model = global model: l_con = log 2 with zero
    # gradient, so round 1 (all clients new) is FedAvg's; once clients have trained before,
    # their previous models differ from the global one and the contrastive term acts.
    moon = registered.trajectory(registered.config('moon', mu=5.0, cohort_size=6), versions=2)
    fedavg = registered.trajectory(registered.config('fedavg', cohort_size=6), versions=2)
    registered.assert_trees_close(moon[0], fedavg[0], atol=1e-6)
    assert registered.max_difference(moon[1], fedavg[1]) > 1e-3


class TestFedDyn:
  def test_first_round_of_every_client_is_fedprox_with_mu_alpha_and_twice_the_step(self):
    # Round 1: every client's g_k is 0, so it minimises L_k + (alpha / 2)||theta - theta_0||^2,
    # FedProx's objective with mu = alpha. The server's h = -(alpha / m) sum_k Delta_k (all m
    # clients take part), so theta_1 = mean_k theta_k - h / alpha = theta_0 + 2 mean_k Delta_k:
    # FedProx's round with the plain mean (1 / |P_t|) and a server learning rate of 2.
    everyone = {'cohort_size': FED.num_clients, 'weighting': 'uniform'}
    config = registered.config('feddyn', alpha=0.5, **everyone)
    start = registered.simulation(config).params
    feddyn = registered.run(config, versions=1)
    fedprox = registered.run(
      registered.config('fedprox', proximal_strength=0.5, server_learning_rate=2.0, **everyone),
      versions=1,
    )
    registered.assert_trees_close(feddyn.params, fedprox.params, atol=1e-6)
    assert registered.max_difference(feddyn.params, start) > 1e-2  # the step is not trivial
