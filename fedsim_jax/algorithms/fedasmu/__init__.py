"""FedASMU (Liu et al. 2024) and its ablations: the settings (`settings`), the registered
factories (`algorithm`), the server's dynamic staleness-aware aggregation (`server`, Formulas
1-3, with the paper's formulas and the readings in its docstring), the devices' fresh-model
blend (`device`, Formulas 7-9), the scheduler (`scheduler`, Alg. 1-2) and the choice of the
fetch epoch (`fetch`, Formulas 5-6)."""

from fedsim_jax.algorithms.fedasmu.algorithm import fedasmu_algorithm
from fedsim_jax.algorithms.fedasmu.settings import VARIANTS, FedasmuSettings

__all__ = ['VARIANTS', 'FedasmuSettings', 'fedasmu_algorithm']
