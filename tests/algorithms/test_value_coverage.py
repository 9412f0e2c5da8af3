"""Every registered algorithm has tests that pin its values: a run equal to a simpler algorithm in
a degenerate case, a paper's rule replayed by hand on a run, or a hand-computed worked example
(not only "it builds and runs"). `VALUE_TESTS` lists them; registering an algorithm without
adding its value tests here fails `test_every_registered_algorithm_has_value_tests`."""

import importlib
import itertools

import pytest

from fedsim_jax import algorithms

FEDOPT = 'tests/algorithms/test_fedopt_values.py'
ASYNC = 'tests/algorithms/test_async_values.py'
FEDAT = 'tests/algorithms/test_fedat_values.py'
BASELINES = 'tests/algorithms/test_fedsa_port_asofed_values.py'
MOON_FEDDYN = 'tests/algorithms/test_moon_feddyn_values.py'
COMPASS = 'tests/algorithms/test_fedcompass_values.py'
CCFEDAVG = 'tests/algorithms/test_ccfedavg_values.py'
FEDASMU = 'tests/algorithms/test_fedasmu_values.py'
STRAGGLERS = 'tests/algorithms/test_stragglers_values.py'
ADAPTIVE = f'{FEDOPT}::test_adaptive_server_steps_follow_reddi_algorithm_2_with_their_defaults'
FULL_BUDGETS = f'{CCFEDAVG}::test_full_budgets_are_fedavg_with_the_plain_mean'
WORKED_BUDGETS = f'{CCFEDAVG}::test_one_constrained_client_worked_by_hand'
COMPASS_REPLAY = f'{COMPASS}::test_group_aggregation_replayed_by_hand'
FIXED_SLOTS = f'{FEDASMU}::test_fixed_slot_variants_are_fedasmu_fetching_after_that_epoch'

# Algorithm -> pytest node ids of tests that assert its values ('[x]': that parametrization).
VALUE_TESTS = {
  'fedavg': [
    f'{FEDOPT}::test_fedavg_is_the_example_weighted_mean_of_local_models',
    'tests/strategy/test_fedopt.py::test_fedavg_matches_a_hand_written_reference',
  ],
  'fedprox': [
    f'{FEDOPT}::test_fedprox_adds_mu_times_the_distance_to_the_download_to_every_gradient',
    f'{FEDOPT}::test_fedprox_with_mu_zero_is_fedavg_bit_for_bit',
  ],
  'fedavgm': [
    f'{FEDOPT}::test_fedavgm_accumulates_server_momentum',
    f'{FEDOPT}::test_fedavgm_with_momentum_zero_is_fedavg_bit_for_bit',
  ],
  'fedadam': [
    f'{ADAPTIVE}[fedadam]',
    f'{FEDOPT}::test_fedadam_first_server_step_on_a_hand_computed_pseudo_gradient',
  ],
  'fedyogi': [f'{ADAPTIVE}[fedyogi]'],
  'fedadagrad': [f'{ADAPTIVE}[fedadagrad]'],
  'fedasync': [
    f'{ASYNC}::TestFedAsync::test_mixing_rule_replayed_by_hand',
    f'{ASYNC}::TestFedAsync::test_delta_form_replayed_by_hand',
  ],
  'fedbuff': [
    f'{ASYNC}::TestFedBuff::test_a_buffer_of_one_is_fedasyncs_delta_form_with_the_same_staleness',
    f'{ASYNC}::TestFedBuff::test_staleness_scaled_buffer_mean_replayed_by_hand',
    'tests/algorithms/test_paper_weighting.py::test_fedbuff_steps_normalization_is_a_fednova_'
    'normalised_sum',
  ],
  'fedat': [
    f'{FEDAT}::test_one_tier_is_fedavg',
    f'{FEDAT}::test_two_tiers_average_their_models_with_reversed_update_counts',
  ],
  'fedsa': [f'{BASELINES}::TestFedSA::test_buffer_update_replayed_by_hand'],
  'port': [f'{BASELINES}::TestPort::test_buffer_update_replayed_by_hand'],
  'asofed': [
    f'{BASELINES}::TestAsoFed::test_without_its_adaptive_parts_it_is_fedasync_with_example_shares',
    f'{BASELINES}::TestAsoFed::test_its_local_constraint_is_a_proximal_term_of_strength_lambda',
  ],
  'moon': [
    f'{MOON_FEDDYN}::TestMoon::test_mu_zero_is_fedavg_bit_for_bit',
    f'{MOON_FEDDYN}::TestMoon::test_a_first_participation_contrasts_nothing_and_a_later_one_does',
  ],
  'ditto': [
    'tests/algorithms/test_ditto_values.py::test_the_global_model_is_fedavgs_for_any_lambda',
    'tests/algorithms/test_ditto_values.py::test_a_first_personal_step_is_the_clients_own_fedavg_step',
    'tests/algorithms/test_ditto_values.py::test_lambda_eta_one_keeps_each_personal_model_a_small_'
    'step_from_the_download',
  ],
  'fedbn': [
    'tests/algorithms/test_fedbn_values.py::test_the_first_round_is_fedavgs',
    'tests/algorithms/test_fedbn_values.py::test_each_clients_batch_norm_leaves_replayed_and_the_'
    'shared_ones_averaged',
  ],
  'fednova': [
    'tests/algorithms/test_fednova_values.py::test_equal_steps_with_sgd_is_fedavg',
    'tests/algorithms/test_fednova_values.py::test_heterogeneous_steps_normalised_average_replayed_by_hand',
    'tests/algorithms/test_fednova_values.py::test_norms_of_the_local_solvers_on_hand_computed_sums',
  ],
  'qffedavg': [
    'tests/algorithms/test_qffl_values.py::test_q_zero_is_fedavg_with_the_plain_mean',
    'tests/algorithms/test_qffl_values.py::test_the_server_step_replayed_from_the_losses_and_deltas',
    'tests/algorithms/test_qffl_values.py::test_the_weights_on_hand_computed_numbers',
  ],
  'scaffold': [
    'tests/algorithms/test_scaffold_values.py::test_option_two_control_variates_replayed_by_hand',
    'tests/algorithms/test_scaffold_values.py::test_the_first_round_is_fedavgs_with_the_plain_mean',
    'tests/algorithms/test_scaffold_values.py::test_with_one_local_step_options_one_and_two_agree',
  ],
  'feddyn': [
    f'{MOON_FEDDYN}::TestFedDyn::test_first_round_of_every_client_is_fedprox_with_mu_alpha_and_'
    'twice_the_step',
    'tests/algorithms/test_paper_weighting.py::test_feddyn_round_with_unequal_clients_is_the_'
    'plain_mean_of_the_deltas',
  ],
  'fedcompass': [
    f'{COMPASS_REPLAY}[fedcompass]',
    f'{COMPASS}::test_homogeneous_clients_worked_by_hand',
    f'{COMPASS}::test_q_min_equal_q_max_is_fedasyncs_delta_form',
  ],
  'fedcompass_m': [f'{COMPASS_REPLAY}[fedcompass_m]'],
  'fedcompass_n': [f'{COMPASS_REPLAY}[fedcompass_n]'],
  'ccfedavg': [
    f'{FULL_BUDGETS}[ccfedavg]',
    f'{WORKED_BUDGETS}[ccfedavg]',
    f'{CCFEDAVG}::test_server_storage_gives_the_client_storage_models',
  ],
  'ccfedavg_c': [f'{FULL_BUDGETS}[ccfedavg_c]', f'{WORKED_BUDGETS}[ccfedavg_c]'],
  'ccfedavg_strategy1': [
    f'{FULL_BUDGETS}[ccfedavg_strategy1]',
    f'{WORKED_BUDGETS}[ccfedavg_strategy1]',
  ],
  'ccfedavg_strategy2': [
    f'{FULL_BUDGETS}[ccfedavg_strategy2]',
    f'{WORKED_BUDGETS}[ccfedavg_strategy2]',
  ],
  'fedavg_dropout': [f'{FULL_BUDGETS}[fedavg_dropout]', f'{WORKED_BUDGETS}[fedavg_dropout]'],
  'fednova_budget': [
    f'{FULL_BUDGETS}[fednova_budget]',
    f'{WORKED_BUDGETS}[fednova_budget]',
    f'{CCFEDAVG}::test_fednova_with_equal_budgets_is_fedavg_with_the_reduced_steps',
    'tests/strategy/test_fedopt.py::test_fednova_budget_server_update_is_fednova',
  ],
  'fedasmu': [
    f'{FEDASMU}::test_fedasmu_da_is_fedasmu_with_a_static_alpha',
    f'{FEDASMU}::test_fedasmu_fa_is_fedasmu_without_the_fetch',
    'tests/strategy/test_fedasmu.py::test_two_segment_tasks_equal_an_eager_blend_at_the_fetch_time',
  ],
  'fedasmu_fa': [
    f'{FEDASMU}::test_formulas_1_to_3_replayed_by_hand',
    f'{FEDASMU}::test_fedasmu_fa_is_fedasmu_without_the_fetch',
    f'{FEDASMU}::test_fedasmu_0_is_fedasmu_fa_with_a_static_alpha',
  ],
  'fedasmu_da': [f'{FEDASMU}::test_fedasmu_da_is_fedasmu_with_a_static_alpha'],
  'fedasmu_0': [
    f'{FEDASMU}::test_fedasmu_0_is_fedasmu_fa_with_a_static_alpha',
    'tests/strategy/test_fedasmu.py::test_fedasmu_0_is_fedasync_with_a_staleness_bound',
  ],
  'fedasmu_h1': [f'{FIXED_SLOTS}[h1-1]'],
  'fedasmu_h2': [f'{FIXED_SLOTS}[h2-2]'],
  'fedasmu_h3': [f'{FIXED_SLOTS}[h3-3]'],
  'fare_dust': [
    f'{STRAGGLERS}::TestFareDust::test_without_distillation_it_is_fedadam_with_over_selection_and_'
    'the_same_ema',
    f'{STRAGGLERS}::TestFareDust::test_distillation_changes_training_only_once_the_history_holds_'
    'a_teacher',
    'tests/strategy/test_stragglers_algorithms.py::TestFareDustEquivalences::test_rho_zero_'
    'without_ema_is_fedadam_with_over_selection',
  ],
  'feast_msg': [
    f'{STRAGGLERS}::TestFeastOnMsg::test_without_stragglers_and_beta_zero_both_models_are_fedavg',
    f'{STRAGGLERS}::TestFeastOnMsg::test_without_stragglers_and_kappa_zero_the_auxiliary_model_'
    'is_an_ema_of_fedavg',
    f'{STRAGGLERS}::TestFeastOnMsg::test_with_over_selection_the_global_model_is_fedavgs_and_'
    'stragglers_reach_only_a',
  ],
}


def test_every_registered_algorithm_has_value_tests():
  registered = set(algorithms.names())
  missing = sorted(registered - set(VALUE_TESTS))
  assert not missing, f'registered algorithms without value tests in VALUE_TESTS: {missing}'
  assert not sorted(set(VALUE_TESTS) - registered), 'VALUE_TESTS names unregistered algorithms'
  assert all(VALUE_TESTS.values())


def _parametrizations(function):
  """Every pytest id the function's parametrize marks give (values joined with '-')."""
  marks = [m for m in getattr(function, 'pytestmark', []) if m.name == 'parametrize']
  options = []
  for mark in marks:
    values = mark.args[1]
    options.append(
      ['-'.join(map(str, v)) if isinstance(v, tuple | list) else str(v) for v in values]
    )
  return {'-'.join(combination) for combination in itertools.product(*options)}


@pytest.mark.parametrize('node', sorted(set(itertools.chain(*VALUE_TESTS.values()))))
def test_every_listed_value_test_exists(node):
  path, *names = node.split('::')
  names[-1], _, parametrization = names[-1].partition('[')
  target = importlib.import_module(path.removesuffix('.py').replace('/', '.'))
  for name in names:
    target = getattr(target, name)
  assert callable(target) and names[-1].startswith('test_')
  if parametrization:
    assert parametrization.rstrip(']') in _parametrizations(target)
