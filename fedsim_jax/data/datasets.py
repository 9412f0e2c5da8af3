"""Dataset sources: the registry `data.name` selects from.

A dataset source is a factory registered in `DATASET_SOURCES` with its frozen settings
dataclass: `factory(settings, context) -> CentralizedDataset` (train and test splits, in stored
order). `settings` are the config's `data.kwargs`, validated; `context` is a `DatasetContext`
(the selected name and the data dir). `data.module` imports a module that registers its own.

Every dataset of the catalog (`fedsim_jax.data.catalog.DATASETS`) is a source without settings
that reads its prepared directory (`fedsim_jax.data.loading.load_dataset`). A `data.name` that
no source has names a prepared directory under the data dir, read the same way (images and
labels), as before sources were registered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from fedsim_jax.data import catalog
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.data.sources import CentralizedDataset
from fedsim_jax.registry import Registry, Selection
from fedsim_jax.settings import Settings


@dataclasses.dataclass(frozen=True)
class DatasetContext:
  """What a dataset source receives besides its settings.

  Attributes:
    name: the selected name (`data.name`).
    data_dir: root of the prepared datasets (`data.data_dir`); None for the default,
      `fedsim_jax.data.loading.default_data_dir()`.
  """

  name: str
  data_dir: str | None = None


DatasetSource = Callable[[Any, DatasetContext], CentralizedDataset]

DATASET_SOURCES: Registry[DatasetSource] = Registry('data', 'dataset source')
"""Every dataset source by name; `data.name` selects one, `data.module` registers more."""


@dataclasses.dataclass(frozen=True)
class PreparedSettings(Settings):
  """No settings: a prepared directory is read as it was written."""


def _catalog_source(spec: catalog.DatasetSpec) -> DatasetSource:
  def load(settings: PreparedSettings, context: DatasetContext) -> CentralizedDataset:
    del settings
    return load_dataset(spec.name, context.data_dir)

  load.__doc__ = f'{spec.kind} dataset of the catalog. {spec.reference}'.strip()
  return load


for _spec in catalog.DATASETS.values():
  DATASET_SOURCES.register(_spec.name, PreparedSettings)(_catalog_source(_spec))


def load_prepared_directory(
  settings: PreparedSettings, context: DatasetContext
) -> CentralizedDataset:
  """A prepared directory `<data_dir>/<name>` outside the catalog: images and labels."""
  del settings
  return load_dataset(context.name, context.data_dir)


def resolve(name: str, kwargs: Mapping[str, Any]) -> Selection:
  """`name`'s source with its settings validated from `kwargs` (errors name
  `data.kwargs.<field>`); a name no source has selects the prepared directory of that name."""
  if name in DATASET_SOURCES:
    return DATASET_SOURCES.resolve(name, kwargs)
  return Selection(name, PreparedSettings.from_kwargs(kwargs, f'{DATASET_SOURCES.section}.kwargs.'))


def load(selection: Selection, data_dir: str | None = None) -> CentralizedDataset:
  """The dataset of the source `selection` (from `resolve`) with the prepared datasets under
  `data_dir`."""
  context = DatasetContext(selection.name, data_dir)
  if selection.name in DATASET_SOURCES:
    return DATASET_SOURCES.get(selection.name).factory(selection.settings, context)
  return load_prepared_directory(selection.settings, context)  # type: ignore[arg-type]
