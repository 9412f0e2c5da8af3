"""CC-FedAvg (Zhang et al.) and the skipping strategies it is compared with: the settings and
registered factories (`algorithm`), the budgeted rounds and server-side history (`scheduler`),
the computation budgets and training schedules (`budgets`)."""

from fedsim_jax.algorithms.ccfedavg.algorithm import (
  BudgetSettings,
  budgeted_algorithm,
  fednova_budget_algorithm,
)

__all__ = ['BudgetSettings', 'budgeted_algorithm', 'fednova_budget_algorithm']
