"""The settings of a run outside its plugins: the federation fields of `data`, and the `client`,
`executor` and `run` sections.

Each section is a frozen `Settings` dataclass: the one place a field's default, allowed values
and description live. `base_config()` builds its sections from these defaults, `validate` checks
a config with them and `--describe` prints them (`SECTIONS`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedsim_jax.client.local_update import CLIENT_OPTIMIZERS
from fedsim_jax.data.client_test import ClientTestData
from fedsim_jax.data.federated import SAMPLING_MODES
from fedsim_jax.executor.choice import BACKEND_SETTINGS, STEP_LOOP_SETTINGS, Backend, StepLoop
from fedsim_jax.metrics.mlflow_writer import DEFAULT_EXPERIMENT, mlflow_available
from fedsim_jax.settings import (
  Check,
  ConfigError,
  Settings,
  boolean,
  decay,
  number,
  one_of,
  positive,
  setting,
  text,
  tuple_of,
)

_INTEGERS = positive(integer=True)


@dataclasses.dataclass(frozen=True)
class DataSettings(Settings):
  """The federation (`data.*` beside the dataset source's `name`, `kwargs` and `module`): how
  many clients, the partition's seed, the straggler-domain split, where the data lives."""

  data_dir: str | None = setting(
    None,
    text(optional=True),
    'root of the prepared datasets (default $FEDSIM_DATA_DIR or ~/fedsim_data)',
  )
  num_clients: int = setting(100, _INTEGERS, 'clients the training split is partitioned over')
  partition_seed: int | None = setting(
    None,
    positive(integer=True, allow_zero=True, optional=True),
    'seed of the partition (default: seed)',
  )
  # Straggler-domain split (Hard et al. 2024, Sec. 4.1) applied after the partition: the
  # num_stragglers clients holding most straggler-class examples become stragglers; the other
  # clients lose those classes.
  straggler_classes: tuple[int, ...] | None = setting(
    None,
    tuple_of(positive(integer=True, allow_zero=True), 'a tuple of class ids', optional=True),
    'straggler-domain split: classes that only stragglers hold (Hard et al. 2024)',
  )
  num_stragglers: int | None = setting(
    None,
    positive(integer=True, optional=True),
    'straggler-domain split: clients made stragglers (None: every holder)',
  )
  lazy: bool = setting(False, boolean, 'keep examples on the host; gather active clients per batch')
  # Per-client evaluation (fedsim_jax/data/client_test.py, docs/personalization.md).
  client_test: str = setting(
    'none',
    one_of(ClientTestData),
    "each client's test data: 'none' (no per-client evaluation), 'held_out' (a fraction of its "
    "partition), 'label_matched' (central test examples with its label mix), 'natural'",
  )
  client_test_fraction: float = setting(
    0.2, number(above=0, below=1), "held_out: fraction of each client's examples held out"
  )
  client_test_examples: int = setting(
    100, _INTEGERS, 'label_matched: test examples drawn per client'
  )

  def check(self, prefix: str) -> None:
    if self.num_stragglers is not None and self.straggler_classes is None:
      raise ConfigError(
        f'{prefix}num_stragglers needs {prefix}straggler_classes (a tuple of classes)'
      )


def _unroll(name: str, value: Any) -> None:
  if not (value is True or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: an integer >= 1 or True')


_unroll.allowed = 'an integer >= 1 or True'  # type: ignore[attr-defined]


def _compilation_cache(name: str, value: Any) -> None:
  if not isinstance(value, str) or not value.strip():
    raise ConfigError(
      f"{name}={value!r} is invalid; allowed values: 'process', 'off' or a directory path"
    )


_compilation_cache.allowed = "'process', 'off' or a directory path"  # type: ignore[attr-defined]


def _coordinator_address(name: str, value: Any) -> None:
  if value is None:
    return
  host, _, port = str(value).rpartition(':')
  if not isinstance(value, str) or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ConfigError(
      f'{name}={value!r} is invalid; allowed values: host:port with a port 1..65535, or None'
    )


_coordinator_address.allowed = 'host:port with a port 1..65535, or None'  # type: ignore[attr-defined]


_MLFLOW_ALLOWED = "an MLflow tracking URI ('file:runs/mlruns', a path, 'http://host:5000') or None"


def _mlflow_uri(name: str, value: Any) -> None:
  if value is None:
    return
  if not isinstance(value, str) or not value.strip():
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: {_MLFLOW_ALLOWED}')
  if not mlflow_available():
    raise ConfigError(
      f'{name}={value!r} needs the MLflow client, which is not installed (pip install '
      "'fedsim_jax[mlflow]'); allowed values: None without it"
    )


_mlflow_uri.allowed = _MLFLOW_ALLOWED  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class ClientSettings(Settings):
  """How a client trains locally (`client.*`)."""

  optimizer: str = setting('sgd', one_of(CLIENT_OPTIMIZERS), 'local optimizer')
  learning_rate: float = setting(0.05, positive(), 'local learning rate')
  momentum: float = setting(0.9, decay(), "'momentum' optimizer only")
  weight_decay: float = setting(0.0, positive(allow_zero=True), 'local weight decay')
  batch_size: int = setting(32, _INTEGERS, 'local batch size')
  local_steps: int | None = setting(
    20,
    positive(integer=True, optional=True),
    'local steps per task (or None and client.local_epochs)',
  )
  local_epochs: float | None = setting(
    None, positive(optional=True), 'local epochs per task (or None)'
  )
  sampling: str = setting('shuffle', one_of(SAMPLING_MODES), 'how local batches are drawn')

  def check(self, prefix: str) -> None:
    if self.local_steps is not None and self.local_epochs is not None:
      raise ConfigError(
        f'{prefix}local_steps / {prefix}local_epochs: set at most one of them (the other to None)'
      )


@dataclasses.dataclass(frozen=True)
class ExecutorSettings(Settings):
  """How client tasks are computed (`executor.*`); results do not depend on these."""

  backend: str = setting(
    'auto',
    one_of(BACKEND_SETTINGS),
    "'vmap', 'loop', or 'auto' (the measured rule, executor/choice.py)",
  )
  unroll: Any = setting(1, _unroll, 'lax.scan unroll of local steps')
  bucket_bits: int = setting(3, _INTEGERS, 'bucketing of batch sizes (fewer compiled shapes)')
  step_loop: str = setting(
    'auto',
    one_of(STEP_LOOP_SETTINGS),
    "'scan', 'host' (one jitted step per local step) or 'auto'",
  )
  deferred: bool = setting(True, boolean, 'compute tasks lazily in batches (same results)')
  devices: int = setting(1, _INTEGERS, 'local devices the task axis is sharded over (vmap)')
  threads: int = setting(
    0,
    positive(integer=True, allow_zero=True),
    'loop backend: tasks run at once; 0 = one per CPU core (1 on accelerators)',
  )
  max_batch_tasks: int = setting(
    0,
    positive(integer=True, allow_zero=True),
    'most tasks computed at once, hence client updates held; larger rounds are summed in '
    'chunks (linear aggregators); 0 = as many as fit in 1 GiB (16 to 4096)',
  )

  def check(self, prefix: str) -> None:
    if self.step_loop == StepLoop.HOST and self.backend == Backend.VMAP:
      raise ConfigError(
        f"{prefix}step_loop='host' is invalid with {prefix}backend={self.backend!r}; allowed: "
        "step_loop 'host' with backend 'loop'"
      )
    if self.threads > 1 and self.backend == Backend.VMAP:
      raise ConfigError(
        f'{prefix}threads={self.threads} is invalid with {prefix}backend='
        "'vmap'; allowed: threads > 1 with backend 'loop' or 'auto'"
      )
    if self.devices > 1 and self.backend == Backend.LOOP:
      raise ConfigError(
        f'{prefix}devices={self.devices} is invalid with {prefix}backend='
        f"{self.backend!r}; allowed: devices > 1 with backend 'vmap'"
      )


_DIVERGENCE = ('stop', 'continue')


@dataclasses.dataclass(frozen=True)
class RunSettings(Settings):
  """How long a run lasts, what it evaluates and writes, and where it runs (`run.*`)."""

  num_rounds: int | None = setting(
    100, positive(integer=True, optional=True), 'server versions to run'
  )
  max_virtual_time: float | None = setting(None, positive(optional=True), 'virtual seconds to run')
  max_client_updates: int | None = setting(
    None, positive(integer=True, optional=True), 'client updates (arrived tasks) to run'
  )
  eval_every: int = setting(5, _INTEGERS, 'server versions between evaluations')
  eval_batch_size: int = setting(1000, _INTEGERS, 'evaluation batch size')
  target_accuracy: float | None = setting(
    None,
    number(above=0, maximum=1, optional=True),
    'summary.json reports when test accuracy first reached it',
  )
  eval_balanced_accuracy: bool = setting(False, boolean, 'also report balanced accuracy')
  eval_top_k: tuple[int, ...] = setting(
    (), tuple_of(_INTEGERS, 'a tuple of integers >= 1'), 'also report top-k'
  )
  eval_clients: int | None = setting(
    None,
    positive(integer=True, optional=True),
    'per-client evaluation (data.client_test): clients evaluated each time, a fresh uniform '
    'sample (None: every client with test data)',
  )
  eval_personalization_steps: int = setting(
    0,
    positive(integer=True, allow_zero=True),
    'per-client evaluation: also evaluate each client after this many local SGD steps of '
    'fine-tuning from the evaluated model (0: off)',
  )
  eval_personalization_learning_rate: float | None = setting(
    None, positive(optional=True), 'fine-tuning learning rate (None: client.learning_rate)'
  )
  compilation_cache: str = setting(
    'process',
    _compilation_cache,
    "'process' shares compiled programs between runs, 'off', or a directory",
  )
  checkpoint_every: int | None = setting(
    None,
    positive(integer=True, optional=True),
    'checkpoint every this many server versions (docs/checkpoints.md)',
  )
  checkpoint_every_minutes: float | None = setting(
    10.0, positive(optional=True), 'checkpoint when this much host time has passed'
  )
  keep_checkpoints: int = setting(2, _INTEGERS, 'newest checkpoints kept')
  on_divergence: str = setting(
    'stop', one_of(_DIVERGENCE), "NaN/inf loss or parameters: 'stop' (exit 3) or 'continue'"
  )
  check_memory: bool = setting(
    True,
    boolean,
    'refuse a run whose estimated memory exceeds what is available (fedsim_jax/memory_estimate.py)',
  )
  write_tasks: bool = setting(
    True,
    boolean,
    'write the task trace, tasks.jsonl: one record per client task (docs/observability.md)',
  )
  tensorboard: bool = setting(
    True,
    boolean,
    'write TensorBoard scalars of every metric to <workdir>/tensorboard (when tensorboardX '
    'is installed)',
  )
  mlflow: str | None = setting(
    None,
    _mlflow_uri,
    'also log params, metrics and the summary to this MLflow tracking URI (docs/logging.md)',
  )
  mlflow_experiment: str = setting(
    DEFAULT_EXPERIMENT, text(), 'the MLflow experiment a run with run.mlflow logs into'
  )
  distributed: bool = setting(
    False,
    boolean,
    'run over several processes with jax.distributed; process 0 writes (docs/distributed.md)',
  )
  coordinator_address: str | None = setting(
    None,
    _coordinator_address,
    'host:port of process 0 (None: FEDSIM_COORDINATOR_ADDRESS or the cluster launcher)',
  )
  num_processes: int | None = setting(
    None,
    positive(integer=True, optional=True),
    'processes of a distributed run (None: FEDSIM_NUM_PROCESSES or the launcher)',
  )
  process_id: int | None = setting(
    None,
    positive(integer=True, allow_zero=True, optional=True),
    "this process's index (None: FEDSIM_PROCESS_ID or the launcher)",
  )

  def check(self, prefix: str) -> None:
    if (
      self.process_id is not None
      and self.num_processes is not None
      and self.process_id >= self.num_processes
    ):
      raise ConfigError(
        f'{prefix}process_id={self.process_id} is invalid with {prefix}num_processes='
        f'{self.num_processes}; allowed: 0..{self.num_processes - 1}'
      )
    if (
      self.num_rounds is None and self.max_virtual_time is None and self.max_client_updates is None
    ):
      raise ConfigError(
        f'{prefix}num_rounds / {prefix}max_virtual_time / {prefix}max_client_updates: set at '
        'least one limit'
      )


SEED_CHECK: Check = number(integer=True, minimum=0, below=2**63)

# The config sections (or, for `data`, the fields of it) each settings class declares.
SECTIONS: dict[str, type[Settings]] = {
  'data': DataSettings,
  'client': ClientSettings,
  'executor': ExecutorSettings,
  'run': RunSettings,
}
