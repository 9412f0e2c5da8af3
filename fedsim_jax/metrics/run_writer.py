"""The protocol every destination of a run's outputs follows besides `metrics.jsonl`:
TensorBoard, MLflow, or a tracker of one's own.

`metrics.jsonl` (`MetricsWriter`) and `summary.json` are a run's record; a `RunWriter` receives
the same rows and summary to mirror them elsewhere. A run opens its writers once its workdir is
set up (`fedsim_jax.lifecycle.RunLifecycle`), each from a `WriterFactory` called with a
`RunInfo`, and then calls:

- `write_metrics(row)` for each metrics row, as it is appended to `metrics.jsonl`;
- `flush()` at each checkpoint and when the run's own outputs are closed;
- `log_artifact(path)` for `clients.json` and the `models/` folder of a finished run;
- `write_summary(summary)` with the summary of the run's end (whatever its status), then
  `close()`.

A class whose constructor takes a `RunInfo` is a factory, so that a tracker of one's own is a
few lines (`docs/logging.md`):

    class PrintWriter(RunWriter):
      def __init__(self, run: RunInfo) -> None:
        self.name = os.path.basename(run.workdir)

      def write_metrics(self, row: Mapping[str, Any]) -> None:
        print(self.name, row['version'], row['test_accuracy'])

    fedsim_jax.run_experiment(config, 'runs/demo', writers=[PrintWriter])

A resumed run opens its writers with `RunInfo.rows`, the rows it had up to the checkpoint it
resumes from (`metrics.jsonl` is rewritten to them): a writer should end with each version once
wherever its backend allows, e.g. by rewriting its log from them (TensorBoard) or by logging
only versions it has not logged yet (MLflow).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class RunInfo:
  """What a writer is opened with.

  Attributes:
    workdir: the run's folder (absolute).
    config: the run's resolved config (as written to `config.json`).
    rows: the metrics rows a resumed run already has (its checkpoint's); empty for a new run.
  """

  workdir: str
  config: Mapping[str, Any]
  rows: Sequence[Mapping[str, Any]] = ()

  @functools.cached_property
  def flat_config(self) -> dict[str, Any]:
    """The resolved config as dotted names -> values (`{'run.num_rounds': 100, ...}`), e.g. a
    tracker's params."""
    return flatten(self.config)

  @property
  def resumed(self) -> bool:
    """Whether the run resumed from a checkpoint that holds rows."""
    return bool(self.rows)


@runtime_checkable
class RunWriter(Protocol):
  """A destination of a run's metrics rows and summary (see the module's docstring).

  Subclass it to inherit the no-op defaults of every method but `write_metrics`; a class that
  does not subclass it must define all five. (The defaults' bodies are statements, not just
  docstrings, so that type checkers take them as implemented rather than abstract.)"""

  def write_metrics(self, row: Mapping[str, Any]) -> None:
    """Receives one metrics row (`metrics.jsonl`'s; non-finite values are None)."""
    ...

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    """Receives the summary the run ended with (`summary.json`'s)."""
    del summary

  def log_artifact(self, path: str) -> None:
    """Receives a file or folder of the run's outputs worth keeping with it."""
    del path

  def flush(self) -> None:
    """Writes out whatever is buffered (at each checkpoint)."""
    return None

  def close(self) -> None:
    """Ends the writer; nothing is written to it afterwards."""
    return None


WriterFactory = Callable[[RunInfo], RunWriter]  # e.g. a RunWriter class


def flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  """A nested mapping as dotted names -> leaves (`{'a': {'b': 1}}` -> `{'a.b': 1}`)."""
  flat: dict[str, Any] = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def numeric_fields(values: Mapping[str, Any]) -> dict[str, float]:
  """The finite numbers of `values` (booleans, None, text and lists left out)."""
  return {
    name: float(value)
    for name, value in values.items()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
  }
