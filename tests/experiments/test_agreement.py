"""The shared verdict rule of docs/results/ (experiments/agreement.py) on hand-made values."""

import pytest

from experiments import agreement
from experiments.agreement import Claim, Value


def _claim(values, side='>', threshold=0.0, **kwargs):
  seeds = {
    seed: None if v is None else (v if isinstance(v, Value) else Value(v))
    for seed, v in enumerate(values)
  }
  return Claim(
    claim='A is more accurate than B',
    source='Table 1',
    paper='+2.0',
    quantity='A − B (pp)',
    side=side,
    seeds=seeds,
    threshold=threshold,
    **kwargs,
  )


@pytest.mark.parametrize(
  'values, side, verdict, reason',
  [
    ([1.0, 1.2, 0.9], '>', agreement.AGREES, ''),
    ([-3.0, -2.5, -4.0], '>', agreement.DOES_NOT_AGREE, ''),
    ([-3.0, -2.5, -4.0], '<', agreement.AGREES, ''),
    ([0.3, -0.4, -1.5], '>', agreement.INCONCLUSIVE, 'seeds on both sides'),
    # Same sign on both seeds, but the mean (1.1) is within the std (1.41).
    ([2.1, 0.1], '>', agreement.INCONCLUSIVE, 'within the seed spread'),
    ([5.0], '>', agreement.INCONCLUSIVE, 'one seed'),
    ([1.0, None, 2.0], '>', agreement.INCONCLUSIVE, 'undetermined on seed 1'),
    ([1.0, 0.0, 2.0], '>', agreement.INCONCLUSIVE, 'a tie on seed 1'),
    # Equal times to a target differ by float rounding only: a tie, not a side.
    ([1.0, -2e-13, 2.0], '>', agreement.INCONCLUSIVE, 'a tie on seed 1'),
  ],
)
def test_verdicts_on_hand_made_values(values, side, verdict, reason):
  assessment = agreement.assess(_claim(values, side))
  assert (assessment.verdict, assessment.reason) == (verdict, reason)


def test_mean_and_spread_are_over_the_seeds():
  assessment = agreement.assess(_claim([1.0, 2.0, 3.0]))
  assert assessment.mean == pytest.approx(2.0) and assessment.std == pytest.approx(1.0)
  assert assessment.seeds == 3


def test_a_threshold_other_than_zero():
  # "A decline of no more than 3 points": FedAvg - CC-FedAvg < 3.
  assert agreement.assess(_claim([2.0, 2.1, 1.9], '<', 3.0)).verdict == agreement.AGREES
  assert agreement.assess(_claim([3.5, 3.6, 3.4], '<', 3.0)).verdict == agreement.DOES_NOT_AGREE
  assert agreement.assess(_claim([2.9, 3.1, 2.0], '<', 3.0)).verdict == agreement.INCONCLUSIVE


def test_a_bound_decides_the_side_only_from_that_side():
  assert agreement.seed_side(Value(12.0, '>')) == '>'  # more than 12: positive
  assert agreement.seed_side(Value(-12.0, '>')) is None  # more than -12: either side
  assert agreement.seed_side(Value(-12.0, '<')) == '<'
  assert agreement.seed_side(Value(12.0, '<')) is None
  # A target missed on one seed (a bound) still gives a verdict when it decides the side.
  claim = _claim([Value(400.0, '>'), 350.0, 420.0])
  assert agreement.assess(claim).verdict == agreement.AGREES
  claim = _claim([Value(-10.0, '>'), 350.0, 420.0])
  assert agreement.assess(claim).reason == 'undetermined on seed 0'


def test_differences_minima_and_maxima_of_times_with_missed_targets():
  reached, missed = Value(100.0), Value(600.0, '>')  # the second run ended at 600 s, short of it
  assert agreement.difference(missed, reached) == Value(500.0, '>')
  assert agreement.difference(reached, missed) == Value(-500.0, '<')
  assert agreement.difference(missed, missed) is None
  assert agreement.difference(reached, Value(40.0)) == Value(60.0)
  assert agreement.minimum([Value(300.0), Value(600.0, '>')]) == Value(300.0)
  assert agreement.minimum([Value(300.0), Value(200.0, '>')]) is None  # may be below 300
  assert agreement.minimum([Value(700.0, '>'), Value(600.0, '>')]) == Value(600.0, '>')
  assert agreement.maximum([Value(300.0), Value(200.0)]) == Value(300.0)
  assert agreement.maximum([Value(300.0), Value(200.0, '>')]) == Value(300.0, '>')
  assert agreement.maximum([Value(300.0), None]) is None
  assert agreement.time_value(None, 600.0) == Value(600.0, '>')
  assert agreement.time_value(120.0, 600.0) == Value(120.0)


def test_invalid_values_are_refused():
  with pytest.raises(ValueError, match='bound'):
    Value(1.0, '>=')
  with pytest.raises(ValueError, match='finite'):
    Value(float('nan'))
  with pytest.raises(ValueError, match='side'):
    _claim([1.0, 2.0], side='=')


def test_the_table_shows_figures_criterion_and_computed_verdicts():
  claims = [
    _claim([1.0, 1.2, 0.9]),
    _claim([-3.0, -2.5, -4.0]),
    _claim([0.3, -0.4, -1.5]),
    _claim([Value(600.0, '>'), None], digits=0),
  ]
  text = agreement.agreement_table(claims, note='A note.')
  lines = text.splitlines()
  assert lines[0].startswith("| Paper's conclusion (where) | paper | ours: quantity |")
  assert lines[2] == (
    '| A is more accurate than B (Table 1) | +2.0 | A − B (pp) | +1.03 ± 0.15 | '
    '0: +1.00, 1: +1.20, 2: +0.90 | > 0 on every seed, beyond 1 std | **agrees** |'
  )
  assert lines[3].endswith(
    '| −3.17 ± 0.76 | 0: −3.00, 1: −2.50, 2: −4.00 | > 0 on every seed, '
    'beyond 1 std | **does not agree** |'
  )
  assert lines[4].endswith('| **inconclusive (seeds on both sides)** |')
  assert '| 0: > +600, 1: n/a |' in lines[5]
  assert lines[5].endswith('| **inconclusive (undetermined on seed 1)** |')
  assert agreement.CRITERION in text and text.endswith('A note.')
  assert agreement.agreement_table([]).startswith('No conclusion')


def test_blocks_state_the_criterion_once_and_bounds_carry_into_the_mean():
  claims = [_claim([Value(600.0, '>'), Value(650.0)], digits=0)]
  text = agreement.agreement_blocks([('Cell A', claims), ('Cell B', []), ('Cell C', claims)])
  assert text.startswith('**Cell A**') and '**Cell B**' not in text and '**Cell C**' in text
  assert text.count(agreement.CRITERION) == 1
  # The mean of a lower bound and an exact value is a lower bound of the mean.
  assert '| > +625 ± 35 | 0: > +600, 1: +650 |' in text
  assert agreement.agreement_blocks([('Cell B', [])]) == agreement.NO_CLAIMS
