"""A run that cannot fit in memory is refused before it starts, naming the setting."""

import jax
import pytest

from fedsim_jax import algorithms, memory_estimate
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import PreparedRun, run_experiment
from fedsim_jax.models import Model, get_model

MB = 2**20
GIB = 2**30
# The 784-200-200-10 MLP of the FedBuff Fashion-MNIST config: 199,210 float32 parameters.
MLP_BYTES = 4 * (784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)


def _settings(name, **kwargs):
  return algorithms.get_spec(name).settings.from_kwargs(kwargs)


def _parts(settings, num_clients=100, data_bytes=0, model_bytes=MB, **execution):
  """The estimate's parts by what they are (a 1 MB model unless given)."""
  needs = memory_estimate.estimate(
    settings,
    num_clients=num_clients,
    model_bytes=model_bytes,
    data_bytes=data_bytes,
    execution=memory_estimate.Execution(**{'training_at_once': 2, **execution}),
  )
  return {need.what.split(' (')[0]: need for need in needs}


SERVER = 'server model and optimizer state: 4 copies of 1 MiB'
WORKSPACE = 'training workspace'
START_MODELS = 'client tasks in flight: start models'
UPDATES = 'client tasks in flight: computed updates'


def test_asynchronous_tasks_share_a_start_model_per_version_and_hold_a_batch_of_updates():
  # FedBuff refills its K = 10 slots at each version: 50 tasks hold 5 start models or more.
  parts = _parts(_settings('fedbuff', concurrency=50), data_bytes=7 * MB, max_batch_tasks=20)
  assert parts[START_MODELS].nbytes == 5 * MB
  assert parts[START_MODELS].setting == 'algorithm.kwargs.concurrency=50'
  assert parts[UPDATES].nbytes == 20 * MB
  assert parts[UPDATES].setting == 'executor.max_batch_tasks=20'
  assert parts[WORKSPACE].nbytes == 6 * MB
  assert parts['training data on the device'].nbytes == 7 * MB
  assert parts[SERVER].nbytes == 4 * MB
  unbounded = _parts(_settings('fedbuff', concurrency=50))
  assert unbounded[UPDATES].nbytes == 50 * MB
  assert unbounded[UPDATES].setting == 'algorithm.kwargs.concurrency=50'
  # FedAsync aggregates every arrival: each task starts from a version of its own.
  assert _parts(_settings('fedasync', concurrency=50))[START_MODELS].nbytes == 50 * MB


def test_fedbuff_with_60000_tasks_in_flight_is_estimated_by_its_versions_and_batch():
  """The FedBuff Fashion-MNIST config with 60,000 tasks in flight and max_batch_tasks=100,
  which ran in 801 MB: it was estimated as 60,000 start models (44.7 GiB)."""
  parts = _parts(
    _settings('fedbuff', concurrency=60_000, buffer_size=10),
    num_clients=60_000,
    model_bytes=MLP_BYTES,
    max_batch_tasks=100,
    training_at_once=16,
  )
  assert parts[START_MODELS].nbytes == 6000 * MLP_BYTES
  assert parts[UPDATES].nbytes == 100 * MLP_BYTES
  assert parts[WORKSPACE].nbytes == 3 * 16 * MLP_BYTES
  total = sum(need.nbytes for need in parts.values())
  assert total == (4 + 6000 + 100 + 48) * MLP_BYTES  # 4.57 GiB
  memory_estimate.check_fits(list(parts.values()), available=13.6 * GIB)


@pytest.mark.parametrize('sums_in_chunks, held', [(True, 100), (False, 1000)])
def test_a_round_holds_one_start_model_and_its_updates_unless_summed_in_chunks(
  sums_in_chunks, held
):
  parts = _parts(
    _settings('fedavg', cohort_size=1000),
    num_clients=10_000,
    max_batch_tasks=100,
    sums_in_chunks=sums_in_chunks,
  )
  assert parts['client tasks per round: their start model'].nbytes == MB
  assert parts['client tasks per round: computed updates'].nbytes == held * MB


def test_the_vmap_backend_trains_a_whole_batch_at_once():
  def workspace(max_batch_tasks):
    parts = _parts(
      _settings('fedavg', cohort_size=10, num_selected=12),
      training_at_once=None,
      max_batch_tasks=max_batch_tasks,
    )
    assert parts['client tasks per round: computed updates'].setting == (
      'algorithm.kwargs.num_selected=12'
    )
    return parts[WORKSPACE].nbytes

  assert workspace(None) == 36 * MB
  assert workspace(4) == 12 * MB


def test_the_batches_of_the_tasks_training_at_once_count():
  parts = _parts(
    _settings('fedavg', cohort_size=10),
    training_at_once=4,
    batch_size=32,
    example_bytes=1000,
    training_setting='executor.threads',
  )
  batches = parts['the training batches and activations of 4 tasks at once']
  assert batches.nbytes == 4 * 32 * 1000
  assert batches.setting == 'client.batch_size=32'
  assert parts[WORKSPACE].setting == 'executor.threads=4'


def test_an_example_costs_its_input_and_the_activations_its_backward_pass_keeps():
  # 8x8 uint8 input -> 16 hidden (ReLU) -> 10 logits.
  model = get_model('mlp', (8, 8, 1), 10, hidden_sizes=(16,))
  params = memory_estimate.abstract_params(model)
  assert memory_estimate.tree_bytes(params) == 4 * (64 * 16 + 16 + 16 * 10 + 10)
  per_example = memory_estimate.training_bytes_per_example(model, params)
  # Its raw input (64 B) and label (4 B) at least, and its float input and hidden activations.
  assert per_example >= 64 + 4 + 4 * (64 + 16)
  # Linear in the width: a wider hidden layer keeps proportionally more per example.
  wide = get_model('mlp', (8, 8, 1), 10, hidden_sizes=(1_000_000,))
  wide_example = memory_estimate.training_bytes_per_example(
    wide, memory_estimate.abstract_params(wide)
  )
  assert wide_example >= 4 * 1_000_000 * 2  # pre- and post-activation of each unit


@pytest.mark.parametrize(
  'name, kwargs, copies',
  [
    ('moon', {}, 100),
    ('feddyn', {}, 100),
    ('asofed', {}, 200),
    ('ccfedavg', {}, 200),
    ('ccfedavg', {'storage': 'server'}, 100),
    ('fare_dust', {'history_length': 7}, 7),
  ],
)
def test_per_client_tables_and_histories_count(name, kwargs, copies):
  settings = _settings(name, **kwargs)
  tables = settings.client_tables(100)
  assert sum(table.copies for table in tables) == copies


def test_fedcompass_keeps_every_client_training():
  assert _settings('fedcompass').tasks_in_flight(37).copies == 37


def test_too_large_a_run_is_one_line_naming_the_largest_part():
  needs = [
    memory_estimate.Need('model.name', 1 * GIB, 'server model'),
    memory_estimate.Need('algorithm.kwargs.concurrency=60000', 90 * GIB, 'tasks in flight'),
  ]
  with pytest.raises(ConfigError) as error:
    memory_estimate.check_fits(needs, available=20 * GIB)
  message = str(error.value)
  assert message.startswith('this run needs at least 91.0 GiB of memory, more than the 20.0 GiB')
  assert 'algorithm.kwargs.concurrency=60000 (tasks in flight) alone takes 90.0 GiB' in message
  assert 'a smaller algorithm.kwargs.concurrency' in message
  assert '\n' not in message
  memory_estimate.check_fits(needs, available=None)  # unknown: not refused
  memory_estimate.check_fits(needs, available=100 * GIB)


def test_the_model_is_blamed_when_even_one_task_of_it_cannot_fit():
  # A 10 GiB model: ten tasks' updates are the largest part, but one task would not fit
  # either; a smaller cohort cannot help, a smaller model can.
  parts = _parts(_settings('fedavg', cohort_size=10), model_bytes=10 * GIB)
  needs = list(
    memory_estimate.estimate(
      _settings('fedavg', cohort_size=10),
      num_clients=100,
      model_bytes=10 * GIB,
      data_bytes=0,
      model_setting='model.kwargs.hidden_sizes=[100000000]',
    )
  )
  assert max(parts.values(), key=lambda n: n.nbytes).setting == 'algorithm.kwargs.cohort_size=10'
  assert memory_estimate.culprit(needs, 60 * GIB).setting == 'model.kwargs.hidden_sizes=[100000000]'
  # Where the smallest values fit, the setting that shrinks the most is blamed.
  assert memory_estimate.culprit(needs, 100 * GIB).setting == 'algorithm.kwargs.cohort_size=10'


def _refusal(config, workdir, available=16 * GIB, monkeypatch=None):
  monkeypatch.setattr(memory_estimate, 'available_bytes', lambda: float(available))
  with pytest.raises(ConfigError) as error:
    PreparedRun(config, workdir)
  assert not workdir.exists()  # refused before anything is written
  message = str(error.value)
  assert '\n' not in message and message.startswith('this run needs at least')
  return message


@pytest.fixture
def no_concrete_init(monkeypatch):
  """Fails a test whose run allocates a model's parameters (`Model.init` outside tracing)."""
  init = Model.init

  def abstract_only(self, key):
    if not isinstance(key, jax.core.Tracer):
      raise AssertionError('the parameters were allocated before the memory check')
    return init(self, key)

  monkeypatch.setattr(Model, 'init', abstract_only)


def test_a_model_too_large_is_refused_before_its_parameters_are_allocated(
  tiny_config, digits_data_dir, tmp_path, monkeypatch, no_concrete_init
):
  # 7.4e9 parameters (29.6 GB each copy): blamed on the model, not the cohort.
  config = tiny_config('fedavg', digits_data_dir, **{'model.kwargs.hidden_sizes': (100_000_000,)})
  message = _refusal(config, tmp_path / 'run', monkeypatch=monkeypatch)
  assert 'model.kwargs.hidden_sizes=[100000000] (server model and optimizer state' in message
  assert 'allowed: a smaller model.kwargs.hidden_sizes' in message


def test_a_model_too_large_for_its_cohort_names_the_model(
  tiny_config, digits_data_dir, tmp_path, monkeypatch
):
  # The same structure at a size that allocates harmlessly: 16.6 MB of parameters, 10 tasks a
  # round (their updates the largest part), 100 MB available: even one task does not fit.
  config = tiny_config(
    'fedavg', digits_data_dir, clients=10, slots=10, **{'model.kwargs.hidden_sizes': (56_000,)}
  )
  message = _refusal(config, tmp_path / 'run', available=100 * MB, monkeypatch=monkeypatch)
  assert ': model.kwargs.hidden_sizes=[56000] (server model' in message


def test_a_batch_too_large_is_refused_naming_the_batch_size(
  tiny_config, digits_data_dir, tmp_path, monkeypatch
):
  config = tiny_config('fedavg', digits_data_dir, **{'client.batch_size': 100_000_000})
  message = _refusal(config, tmp_path / 'run', monkeypatch=monkeypatch)
  assert ': client.batch_size=100000000 (the training batches and activations of' in message
  assert 'allowed: a smaller client.batch_size' in message


def test_asynchronous_slots_are_not_refused_for_start_models_they_share(
  tiny_config, digits_data_dir, tmp_path, monkeypatch
):
  # 60 tasks in flight, a version every 10 arrivals: 6 start models of 0.15 MB, not 60.
  overrides = {
    'model.kwargs.hidden_sizes': (500,),
    'algorithm.kwargs.buffer_size': 10,
    'executor.max_batch_tasks': 10,
  }
  config = tiny_config('fedbuff', digits_data_dir, clients=60, slots=60, **overrides)
  monkeypatch.setattr(memory_estimate, 'available_bytes', lambda: 8.0 * MB)
  prepared = PreparedRun(config, tmp_path / 'run')  # not refused
  prepared.writer.close()
  prepared._lock.release()


def test_the_run_is_refused_before_anything_is_written(
  tiny_config, digits_data_dir, tmp_path, monkeypatch
):
  monkeypatch.setattr(memory_estimate, 'available_bytes', lambda: 1000.0)
  with pytest.raises(ConfigError, match='run.check_memory=False'):
    run_experiment(tiny_config('fedbuff', digits_data_dir), tmp_path / 'run')
  assert not (tmp_path / 'run').exists()
  config = tiny_config('fedbuff', digits_data_dir, **{'run.check_memory': False})
  assert run_experiment(config, tmp_path / 'run')['status'] == 'completed'


def _fake_machine(root, *, meminfo_gib=20.0, cgroup='0::/\n', files=()):
  """A root directory with /proc/meminfo, /proc/self/cgroup and cgroup `files`
  ((path under sys/fs/cgroup, text), ...)."""
  (root / 'proc/self').mkdir(parents=True)
  (root / 'proc/meminfo').write_text(
    f'MemTotal:       99999999 kB\nMemAvailable:   {int(meminfo_gib * 2**20)} kB\n'
  )
  (root / 'proc/self/cgroup').write_text(cgroup)
  (root / 'sys/fs/cgroup').mkdir(parents=True)
  for path, text in files:
    (root / 'sys/fs/cgroup' / path).parent.mkdir(parents=True, exist_ok=True)
    (root / 'sys/fs/cgroup' / path).write_text(text)
  return str(root)


V1_UNLIMITED = '9223372036854771712\n'


@pytest.mark.parametrize(
  'cgroup, files, expected_gib',
  [
    # v2, the process's cgroup at the mount point (a cgroup namespace): 4 GiB, 1 GiB used of
    # which 0.5 GiB is reclaimable page cache.
    (
      '0::/\n',
      [
        ('memory.max', f'{4 * GIB}\n'),
        ('memory.current', f'{GIB}\n'),
        ('memory.stat', f'anon 1\ninactive_file {GIB // 2}\n'),
      ],
      3.5,
    ),
    # v2, the limit set on a parent of the process's cgroup.
    (
      '0::/user.slice/job.scope\n',
      [
        ('memory.max', 'max\n'),
        ('user.slice/memory.max', f'{4 * GIB}\n'),
        ('user.slice/memory.current', f'{GIB}\n'),
        ('user.slice/job.scope/memory.max', 'max\n'),
        ('user.slice/job.scope/memory.current', f'{GIB}\n'),
      ],
      3.0,
    ),
    # v2, the cgroup path hidden (no namespace): only the mount point's files exist.
    ('0::/docker/abc\n', [('memory.max', f'{4 * GIB}\n'), ('memory.current', '0\n')], 4.0),
    # v1, the memory controller's own hierarchy, limited below its root.
    (
      '4:memory:/process_api/abc\n1:cpu:/\n0::/\n',
      [
        ('memory/memory.limit_in_bytes', V1_UNLIMITED),
        ('memory/memory.usage_in_bytes', f'{8 * GIB}\n'),
        ('memory/process_api/abc/memory.limit_in_bytes', f'{4 * GIB}\n'),
        ('memory/process_api/abc/memory.usage_in_bytes', f'{2 * GIB}\n'),
        ('memory/process_api/abc/memory.stat', f'cache 5\ntotal_inactive_file {GIB}\n'),
      ],
      3.0,
    ),
    # No limit anywhere: the host's available memory.
    (
      '4:memory:/\n0::/\n',
      [('memory.max', 'max\n'), ('memory/memory.limit_in_bytes', V1_UNLIMITED)],
      20.0,
    ),
    # A limit larger than what the host has left: the host's figure.
    ('0::/\n', [('memory.max', f'{64 * GIB}\n'), ('memory.current', '0\n')], 20.0),
  ],
)
def test_available_memory_honours_cgroup_limits(tmp_path, cgroup, files, expected_gib):
  root = _fake_machine(tmp_path, cgroup=cgroup, files=files)
  assert memory_estimate.available_bytes(root) == expected_gib * GIB


def test_available_memory_without_proc_or_cgroups_is_unknown(tmp_path):
  assert memory_estimate.available_bytes(str(tmp_path)) is None


def test_this_machine_reports_its_available_memory():
  available = memory_estimate.available_bytes()
  assert available is not None and available > 0
