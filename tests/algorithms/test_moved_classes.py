"""A checkpoint written before a paper's code moved into `fedsim_jax.algorithms` still loads: the
classes it names under their old modules resolve to the classes of the new ones."""

import importlib
import io
import pickle

import pytest

from fedsim_jax import checkpointing

# Old module -> (class, new module), for every class a checkpoint may name.
MOVED = {
  'fedsim_jax.strategy.asofed': [
    (name, 'fedsim_jax.algorithms.asofed')
    for name in ('AsoFedInputs', 'AsoFedCarry', 'AsoFedCorrection', 'AsoFedServerState')
  ]
  + [('AsoFedClients', 'fedsim_jax.algorithms.asofed')],
  'fedsim_jax.strategy.budgets': [
    (name, 'fedsim_jax.algorithms.ccfedavg.budgets')
    for name in (
      'TrainingSchedule',
      'AdHocSchedule',
      'RoundRobinSchedule',
      'SynchronisedSchedule',
      'QuotaSchedule',
    )
  ],
  'fedsim_jax.strategy.ccfedavg': [
    (name, 'fedsim_jax.algorithms.ccfedavg.scheduler')
    for name in ('HistoryState', 'BudgetedScheduler')
  ],
  'fedsim_jax.strategy.fare_dust': [
    (name, 'fedsim_jax.algorithms.stragglers.fare_dust')
    for name in ('HistorySlot', 'DeltaHistory', 'FareDustScheduler')
  ],
  'fedsim_jax.strategy.feast_msg': [
    (name, 'fedsim_jax.algorithms.stragglers.feast_msg')
    for name in ('FeastState', 'AuxiliaryUpdate', 'StragglerWindow', 'FeastScheduler')
  ],
  'fedsim_jax.strategy.fedasmu': [
    ('FedasmuServerState', 'fedsim_jax.algorithms.fedasmu.server'),
    ('FetchInputs', 'fedsim_jax.algorithms.fedasmu.device'),
    ('BlendRecord', 'fedsim_jax.algorithms.fedasmu.device'),
    ('FreshModelBlend', 'fedsim_jax.algorithms.fedasmu.device'),
    ('FedasmuScheduler', 'fedsim_jax.algorithms.fedasmu.scheduler'),
  ],
  'fedsim_jax.strategy.fedasmu_fetch': [
    (name, 'fedsim_jax.algorithms.fedasmu.fetch')
    for name in ('FixedFetch', 'MetaModel', 'MetaSpec', 'QTable', '_Pending', 'LearnedFetch')
  ],
  'fedsim_jax.strategy.fedasync': [('MixingState', 'fedsim_jax.algorithms.fedasync')],
  'fedsim_jax.strategy.fedat': [
    (name, 'fedsim_jax.algorithms.fedat') for name in ('TierState', 'TieredScheduler')
  ],
  'fedsim_jax.strategy.fedcompass': [
    (name, 'fedsim_jax.algorithms.fedcompass')
    for name in ('ClientRecord', 'ArrivalGroup', 'CompassScheduler')
  ],
  'fedsim_jax.strategy.feddyn': [
    (name, 'fedsim_jax.algorithms.feddyn')
    for name in ('FedDynInputs', 'FedDynState', 'DynamicRegulariser', 'FedDynScheduler')
  ],
  'fedsim_jax.strategy.fedopt': [('ServerOptState', 'fedsim_jax.strategy.server_step')],
  'fedsim_jax.strategy.fedsa': [('FedSAState', 'fedsim_jax.algorithms.fedsa')],
  'fedsim_jax.strategy.moon': [
    (name, 'fedsim_jax.algorithms.moon') for name in ('MoonInputs', 'Contrastive', 'MoonScheduler')
  ],
  'fedsim_jax.strategy.port': [('PortState', 'fedsim_jax.algorithms.port')],
  'fedsim_jax.algorithms.fare_dust': [
    ('FareDustSettings', 'fedsim_jax.algorithms.stragglers.fare_dust')
  ],
  'fedsim_jax.algorithms.feast_msg': [
    ('FeastSettings', 'fedsim_jax.algorithms.stragglers.feast_msg')
  ],
  'fedsim_jax.algorithms.ccfedavg': [
    (name, 'fedsim_jax.algorithms.ccfedavg.algorithm')
    for name in ('BudgetSettings', '_EverySelected')
  ],
  'fedsim_jax.algorithms.fedasmu': [('FedasmuSettings', 'fedsim_jax.algorithms.fedasmu')],
}
CASES = [(old, name, new) for old, moved in MOVED.items() for name, new in moved]


def _load_global(module: str, name: str):
  """Unpickles a reference to `module.name` (pickle's GLOBAL opcode) as a checkpoint is read."""
  data = f'c{module}\n{name}\n.'.encode()
  return checkpointing._ArrayUnpickler(io.BytesIO(data), {}).load()


@pytest.mark.parametrize('old, name, new', CASES, ids=[f'{o}.{n}' for o, n, _ in CASES])
def test_a_class_under_its_old_module_loads_as_the_moved_class(old, name, new):
  assert _load_global(old, name) is getattr(importlib.import_module(new), name)


def test_classes_that_did_not_move_load_as_before():
  from fedsim_jax.strategy.synchronous import SynchronousScheduler

  assert _load_global('fedsim_jax.strategy.synchronous', 'SynchronousScheduler') is (
    SynchronousScheduler
  )
  with pytest.raises(ModuleNotFoundError):  # no class of that name moved
    _load_global('fedsim_jax.strategy.fedopt', 'NoSuchClass')


def test_a_pickled_state_of_the_old_layout_round_trips():
  from fedsim_jax.strategy.server_step import ServerOptState

  state = ServerOptState(params={'w': 1.0}, opt_state=())
  data = pickle.dumps(state, protocol=0).replace(
    b'fedsim_jax.strategy.server_step', b'fedsim_jax.strategy.fedopt'
  )
  assert b'fedsim_jax.strategy.fedopt' in data
  restored = checkpointing._ArrayUnpickler(io.BytesIO(data), {}).load()
  assert type(restored) is ServerOptState and restored.params == {'w': 1.0}
