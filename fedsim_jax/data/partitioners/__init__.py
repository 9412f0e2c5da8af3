"""Host-side numpy partitioners that split a dataset's examples among clients.

Every partitioner is a pure function of its arguments (randomness comes only from `seed`) and
returns `list[np.ndarray]`: one sorted int64 array of example indices per client, which
together assign every example exactly once (`natural` may drop small clients).

Each is registered in `PARTITIONERS` (`fedsim_jax.registry.Registry`) with its settings
dataclass; a config selects one with `partition.name` and `partition.kwargs`, and
`partition.module` imports a module that registers its own. The registered factory takes the
settings and a `PartitionContext`; the functions below are the same splits with plain
arguments. One module per family:

* `iid`: uniform random split into near-equal parts.
* `dirichlet`: label skew drawn from a Dirichlet distribution (Yurochkin et al. 2019, "Bayesian
  Nonparametric Federated Learning of Neural Networks"; Hsu et al. 2019, "Measuring the Effects
  of Non-Identical Data Distribution").
* `shards`: sort-and-shard pathological non-IID split (McMahan et al. 2017,
  "Communication-Efficient Learning of Deep Networks from Decentralized Data"), and
  `two_classes` (CC-FedAvg, Sec. VI-B, Table II: `shards` with 2 shards per client).
* `class` (`class_partition`) and `dual_dirichlet`: FedCompass's class partition (Algorithm 4)
  and dual Dirichlet partition (Algorithm 5) (Li et al. 2024, "FedCompass: Efficient
  Cross-Silo Federated Learning on Heterogeneous Client Devices Using a Computing Power-Aware
  Scheduler", Appendix D.1).
* `gamma_mix` and `budget_skewed`: CC-FedAvg's cross-silo gamma share of IID data over a
  label-sorted split, and its budget-correlated shards (Zhang et al. 2024, "CC-FedAvg:
  Computationally Customized Federated Averaging", Sec. VI-A, VI-B, Tables IV, V).
* `natural`: one client per distinct natural id (writer, speaking role, user; LEAF, Caldas et
  al. 2018).

`straggler_domain_split` is not a partitioner: it turns any split into standard and straggler
clients by straggler classes (Hard et al. 2024, "Learning from straggler clients in federated
learning", Sec. 4.1), and returns the parts and a straggler mask.
"""

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  Partitioner,
  partition,
  run_partitioner,
)
from fedsim_jax.data.partitioners.ccfedavg import (
  BUDGET_SKEWS,
  BudgetSkewedSettings,
  GammaMixSettings,
  budget_skewed,
  gamma_mix,
)
from fedsim_jax.data.partitioners.dirichlet import DirichletSettings, dirichlet
from fedsim_jax.data.partitioners.fedcompass import (
  FEDCOMPASS_NUM_CLIENTS,
  ClassSettings,
  DualDirichletSettings,
  class_partition,
  dual_dirichlet,
  fedcompass_class_partition_settings,
  fedcompass_dual_dirichlet_settings,
)
from fedsim_jax.data.partitioners.iid import IidSettings, iid
from fedsim_jax.data.partitioners.natural import NaturalSettings, natural
from fedsim_jax.data.partitioners.shards import (
  ShardsSettings,
  TwoClassesSettings,
  shards,
  two_classes_per_client,
)
from fedsim_jax.data.partitioners.straggler import straggler_domain_split

__all__ = [
  'PARTITIONERS',
  'PartitionContext',
  'Partitioner',
  'partition',
  'run_partitioner',
  'BUDGET_SKEWS',
  'BudgetSkewedSettings',
  'GammaMixSettings',
  'budget_skewed',
  'gamma_mix',
  'DirichletSettings',
  'dirichlet',
  'FEDCOMPASS_NUM_CLIENTS',
  'ClassSettings',
  'DualDirichletSettings',
  'class_partition',
  'dual_dirichlet',
  'fedcompass_class_partition_settings',
  'fedcompass_dual_dirichlet_settings',
  'IidSettings',
  'iid',
  'NaturalSettings',
  'natural',
  'ShardsSettings',
  'TwoClassesSettings',
  'shards',
  'two_classes_per_client',
  'straggler_domain_split',
]
