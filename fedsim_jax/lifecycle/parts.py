"""What a run's lifecycle receives: the built run (`RunParts`), the settings it goes by
(`RunOptions`) and its evaluator, read from the config once, at the edge."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedsim_jax.client.local_update import sgd_client_update
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.executor import Executor
from fedsim_jax.metrics import make_evaluator
from fedsim_jax.metrics.client_evaluation import ClientEvaluator, Personalization, speed_groups
from fedsim_jax.models import Model
from fedsim_jax.registry import Selection
from fedsim_jax.run_spec import RunSpec
from fedsim_jax.runtime import Simulation, StopCondition
from fedsim_jax.settings import ConfigError, Settings
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.transforms.accounting import PrivacyMonitor

Evaluator = Callable[[Any], Mapping[str, Any]]  # params -> {'accuracy', 'loss', ...}


class OnDivergence(StrEnum):
  """What a run does when its evaluated model's loss or parameters become NaN or infinite
  (`run.on_divergence`)."""

  STOP = 'stop'  # end it as `diverged`
  CONTINUE = 'continue'  # warn once and go on (the summary's best skips those evaluations)


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """The settings a run's lifecycle goes by."""

  eval_every: int
  checkpoint_every: int | None
  checkpoint_every_minutes: float | None
  keep_checkpoints: int
  write_tasks: bool
  tensorboard: bool
  mlflow: str | None  # the tracking URI, or None
  mlflow_experiment: str
  on_divergence: OnDivergence
  distributed: bool
  target_accuracy: float | None
  batch_size: int  # the clients', for the summary's examples per second
  algorithm: str  # named in a divergence's message, with...
  learning_rates: tuple[str, ...]  # ...the settings to lower, as 'name=value'

  @classmethod
  def from_spec(cls, spec: RunSpec) -> RunOptions:
    """The options of the run `spec` (resolved) describes."""
    run = spec.run
    return cls(
      eval_every=run.eval_every,
      checkpoint_every=run.checkpoint_every,
      checkpoint_every_minutes=run.checkpoint_every_minutes,
      keep_checkpoints=run.keep_checkpoints,
      write_tasks=run.write_tasks,
      tensorboard=run.tensorboard,
      mlflow=run.mlflow,
      mlflow_experiment=run.mlflow_experiment,
      on_divergence=OnDivergence(run.on_divergence),
      distributed=run.distributed,
      target_accuracy=run.target_accuracy,
      batch_size=spec.client.batch_size,
      algorithm=spec.algorithm.name,
      learning_rates=(
        f'client.learning_rate={spec.client.learning_rate}',
        *(
          f'algorithm.kwargs.{name}={value}'
          for name, value in spec.algorithm.settings.as_dict().items()
          if 'learning_rate' in name
        ),
      ),
    )


@dataclasses.dataclass(frozen=True)
class RunParts:
  """What a run is built of (`fedsim_jax.experiment.build_run`); building writes nothing."""

  dataset: FederatedDataset
  model_description: dict[str, Any]  # what `load_run` rebuilds the saved models from
  algorithm_settings: Settings
  simulation: Simulation
  evaluate: Evaluator
  stop: StopCondition
  resolved_config: dict[str, Any]  # written as config.json; a resumed run's must match
  selections: dict[str, Selection]  # the resolved plugin sections (data, partition, model, ...)
  options: RunOptions
  # An executor like the simulation's over other data and keys (lockstep's shared batches):
  # `(data, keys, stream_hyperparameters=None)` (`fedsim_jax.lifecycle.lockstep.executor_like`).
  executor_like: Callable[..., Executor]
  # Differential privacy: epsilon per metrics row and in the summary, the epsilon budget.
  privacy: PrivacyMonitor | None = None
  # The update transforms' figures for the summary (`transforms`), and what each task record
  # gains (the update's bytes, whether its client attacks).
  transforms_summary: Mapping[str, Any] | None = None
  annotate_task: Callable[[dict[str, Any]], dict[str, Any]] | None = None
  # Per-client evaluation on each client's own test data (`data.client_test`), or None.
  client_evaluate: ClientEvaluator | None = None


def evaluator(spec: RunSpec, model: Model, dataset: FederatedDataset) -> Evaluator:
  """The evaluator of `model` on `dataset`'s test split that `run.eval_*` asks for;
  `ConfigError` for settings that do not fit the dataset (class metrics are checked against its
  classes)."""
  run = spec.run
  try:
    return make_evaluator(
      model,
      dataset.test_x,
      dataset.test_y,
      run.eval_batch_size,
      class_groups=dict(spec.eval_class_groups) or None,
      balanced_accuracy=run.eval_balanced_accuracy,
      top_k=tuple(run.eval_top_k),
    )
  except ValueError as error:  # its messages name the evaluator's argument
    message = str(error)
    named = message.startswith(('top_k', 'class_groups[', 'balanced_accuracy'))
    raise ConfigError(('run.eval_' if named else 'run.eval_*: ') + message) from None


def client_groups(
  dataset: FederatedDataset, simulation: Simulation, spec: RunSpec | None = None
) -> dict[str, Any]:
  """Named groups of clients for per-group figures: the straggler-domain split's stragglers
  and standard clients, the fast, medium and slow thirds by expected step time, and, for the
  budgeted algorithms (CC-FedAvg's family), one group per compute budget p (`budget_<p>`)."""
  groups: dict[str, Any] = {}
  budgets = None if spec is None else getattr(spec.algorithm.settings, 'client_budgets', None)
  if budgets is not None:
    p = np.asarray(budgets(dataset.num_clients, spec.seed))  # type: ignore[union-attr]
    groups.update({f'budget_{value:g}': p == value for value in np.unique(p)})
  if dataset.straggler_mask is not None:
    groups.update(straggler=dataset.straggler_mask, standard=~dataset.straggler_mask)
  latency = simulation.latency
  times = [latency.expected_step_time(c) for c in range(dataset.num_clients)]
  groups.update(speed_groups(np.asarray(times)))
  return groups


def client_evaluator(
  spec: RunSpec, model: Model, dataset: FederatedDataset, simulation: Simulation
) -> ClientEvaluator | None:
  """The per-client evaluator `data.client_test` and `run.eval_*` ask for (None when
  `data.client_test` is 'none'); `ConfigError` for settings that do not fit the federation."""
  test = dataset.client_test
  run = spec.run
  if test is None:
    for name in ('eval_clients', 'eval_personalization_steps'):
      if getattr(run, name):
        raise ConfigError(
          f'run.{name}={getattr(run, name)!r} needs per-client test data; allowed: '
          "data.client_test='held_out', 'label_matched' or 'natural', or the default"
        )
    return None
  personalization = None
  if run.eval_personalization_steps:
    if isinstance(dataset, LazyFederation):
      raise ConfigError(
        'run.eval_personalization_steps needs the federation on device; allowed: '
        'data.lazy=False, or run.eval_personalization_steps=0'
      )
    import optax

    rate = run.eval_personalization_learning_rate or spec.client.learning_rate
    personalization = Personalization(
      steps=run.eval_personalization_steps,
      client_update=sgd_client_update(model, optax.sgd(rate), spec.client.batch_size),
      data=dataset.device_arrays(),
      sampling=spec.client.sampling,
    )
  try:
    return ClientEvaluator(
      model,
      test,
      run.eval_batch_size,
      groups=client_groups(dataset, simulation, spec),
      sample_size=run.eval_clients,
      seed=spec.seed,
      personalization=personalization,
    )
  except ValueError as error:
    raise ConfigError(
      f'run.{error}' if str(error).startswith('eval_') else f'data.client_test: {error}'
    ) from None
