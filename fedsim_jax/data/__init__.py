"""Data layer: dataset catalog, offline sources, tfds data dirs, partitioners, federations."""

from fedsim_jax.data.catalog import DATASETS, DatasetSpec
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
from fedsim_jax.data.federated import (
  SAMPLING_MODES,
  BatchCursor,
  ClientDataArrays,
  FederatedDataset,
  client_batch,
)
from fedsim_jax.data.loading import CentralizedDataset, default_data_dir, load_dataset
from fedsim_jax.data.partitioners import (
  PARTITIONERS,
  PartitionContext,
  class_partition,
  dirichlet,
  dual_dirichlet,
  iid,
  partition,
  shards,
)
from fedsim_jax.data.synthetic import toy_federation

__all__ = [
  'DATASETS',
  'DatasetSpec',
  'CorruptDatasetError',
  'DatasetNotFoundError',
  'SAMPLING_MODES',
  'BatchCursor',
  'ClientDataArrays',
  'FederatedDataset',
  'client_batch',
  'CentralizedDataset',
  'default_data_dir',
  'load_dataset',
  'PARTITIONERS',
  'PartitionContext',
  'class_partition',
  'dirichlet',
  'dual_dirichlet',
  'iid',
  'partition',
  'shards',
  'toy_federation',
]
