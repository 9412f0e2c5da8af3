"""FARe-DUST and FeAST-on-MSG (Hard et al., "Learning from straggler clients"), as registered:
the degenerate cases in which FARe-DUST is FedAdam with over-selection and an EMA, and
FeAST-on-MSG's global and auxiliary models are FedAvg and its EMA."""

from tests.algorithms import registered

# Algorithm 1's and 2's unweighted sums: FedAvg / FedAdam with uniform weights.
OVER_SELECTED = {'cohort_size': 3, 'num_selected': 5, 'weighting': 'uniform'}


class TestFareDust:
  def test_without_distillation_it_is_fedadam_with_over_selection_and_the_same_ema(self):
    adam = {'server_learning_rate': 0.05, 'eps': 1e-3, 'b1': 0.8, 'b2': 0.95, 'ema_decay': 0.5}
    # FedAdam's EMA starts at the initial model; FARe-DUST's reading is named to match it.
    fare = registered.run(
      registered.config('fare_dust', rho=0.0, ema_warmup='none', **adam, **OVER_SELECTED), 5
    )
    fedadam = registered.run(registered.config('fedadam', **adam, **OVER_SELECTED), 5)
    assert fare.scheduler.report()['late_updates_folded'] > 0  # stragglers reached the history
    registered.assert_trees_equal(fare.params, fedadam.params)
    registered.assert_trees_equal(fare.eval_params, fedadam.eval_params)
    assert registered.max_difference(fare.eval_params, fare.params) > 1e-4

  def test_distillation_changes_training_only_once_the_history_holds_a_teacher(self):
    def trajectory(rho):
      config = registered.config('fare_dust', rho=rho, ema_decay=0.0, **OVER_SELECTED)
      return registered.trajectory(config, versions=2)

    plain, distilled = trajectory(0.0), trajectory(5.0)
    registered.assert_trees_equal(distilled[0], plain[0])  # round 0: no history, no teacher
    assert registered.max_difference(distilled[1], plain[1]) > 1e-4


class TestFeastOnMsg:
  def test_without_stragglers_and_beta_zero_both_models_are_fedavg(self):
    # No over-selection: Delta^+ = Delta, w^+ = w_{t+1}, and a_{t+1} = w^+ (beta = 0).
    kwargs = {'cohort_size': 3, 'weighting': 'uniform', 'server_learning_rate': 0.7}
    feast = registered.run(registered.config('feast_msg', ema_decay=0.0, **kwargs), versions=4)
    fedavg = registered.run(registered.config('fedavg', **kwargs), versions=4)
    registered.assert_trees_equal(feast.params, fedavg.params)
    registered.assert_trees_close(feast.eval_params, fedavg.params, atol=1e-6)

  def test_without_stragglers_and_kappa_zero_the_auxiliary_model_is_an_ema_of_fedavg(self):
    # a_{t+1} = beta a_t + (1 - beta) w_{t+1}: FedAvg's evaluated EMA with the same beta.
    kwargs = {'cohort_size': 3, 'weighting': 'uniform', 'server_learning_rate': 0.7}
    feast = registered.run(
      registered.config('feast_msg', kappa=0.0, ema_decay=0.6, **kwargs), versions=4
    )
    fedavg = registered.run(registered.config('fedavg', ema_decay=0.6, **kwargs), versions=4)
    registered.assert_trees_equal(feast.params, fedavg.params)
    registered.assert_trees_close(feast.eval_params, fedavg.eval_params, atol=1e-6)
    assert registered.max_difference(feast.eval_params, feast.params) > 1e-4

  def test_with_over_selection_the_global_model_is_fedavgs_and_stragglers_reach_only_a(self):
    kwargs = {**OVER_SELECTED, 'server_learning_rate': 0.7}
    feast = registered.run(
      registered.config('feast_msg', kappa=0.5, ema_decay=0.5, **kwargs), versions=5
    )
    fedavg = registered.run(registered.config('fedavg', **kwargs), versions=5)
    assert feast.scheduler.folded > 0
    registered.assert_trees_equal(feast.params, fedavg.params)
