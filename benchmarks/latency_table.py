"""One-epoch latency percentiles of the log-normal straggler models vs the paper's Table 8.

Hard et al., "Learning from straggler clients in federated learning", Sec. 3 and Appendix F
(Table 8, CIFAR-100): 500 clients with 100 examples each, 125 of them stragglers, batch size
20, one local epoch (5 steps). Every client draws `--draws` tasks through the per-task
`LogNormalLatency.sample` path; prints a markdown table.

The paper's table reads as one epoch over the dataset, i.e. one draw per client (375 standard,
125 straggler), so its tails are noisy. The last column is the 5th-95th percentile range of
each statistic over `--replicates` such one-draw-per-client epochs (drawn with `sample_many`).

  .venv/bin/python benchmarks/latency_table.py
"""

from __future__ import annotations

import argparse

import numpy as np

from fedsim_jax.runtime.latency.straggler import LogNormalLatency

# Table 8 (CIFAR-100): p50, p95, p99 seconds.
PAPER_TABLE_8 = {
  ('per_example', 'standard'): (60.21, 117.9, 193.5),
  ('per_example', 'straggler'): (60.21, 117.1, 204.7),
  ('per_domain_per_example', 'standard'): (52.04, 111.2, 154.6),
  ('per_domain_per_example', 'straggler'): (114.2, 259.9, 450.6),
}
PERCENTILES = (50, 95, 99)


def simulate(
  model: str,
  *,
  num_clients: int,
  num_stragglers: int,
  examples: int,
  batch_size: int,
  draws: int,
  seed: int,
) -> dict[str, np.ndarray]:
  """One-epoch durations per group: {'standard': array, 'straggler': array}."""
  mask = np.zeros(num_clients, bool)
  mask[:num_stragglers] = True
  latency = LogNormalLatency(
    num_clients,
    np.random.default_rng(seed),
    examples_per_step=min(batch_size, examples),
    straggler_mask=mask,
    model=model,
  )
  steps = examples // min(batch_size, examples)  # one epoch: steps * batch == examples
  durations = np.array(
    [[latency.sample(c).duration(steps) for c in range(num_clients)] for _ in range(draws)]
  )
  return {'standard': durations[:, ~mask].ravel(), 'straggler': durations[:, mask].ravel()}


def replicate_range(
  model: str,
  *,
  num_clients: int,
  num_stragglers: int,
  examples: int,
  batch_size: int,
  replicates: int,
  seed: int,
) -> dict[str, np.ndarray]:
  """Per group, the 5th and 95th percentile (rows) of p50/p95/p99 (columns) over `replicates`
  epochs with one draw per client."""
  mask = np.zeros(num_clients, bool)
  mask[:num_stragglers] = True
  per_step = min(batch_size, examples)
  latency = LogNormalLatency(
    num_clients,
    np.random.default_rng(seed),
    examples_per_step=per_step,
    straggler_mask=mask,
    model=model,
  )
  ids = np.tile(np.arange(num_clients), replicates)
  durations = latency.sample_many(ids).duration(examples // per_step)
  durations = durations.reshape(replicates, num_clients)
  result = {}
  for group, columns in (('standard', ~mask), ('straggler', mask)):
    stats = np.percentile(durations[:, columns], PERCENTILES, axis=1).T  # (replicates, 3)
    result[group] = np.percentile(stats, (5, 95), axis=0)
  return result


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--num_clients', type=int, default=500)
  parser.add_argument('--num_stragglers', type=int, default=125)
  parser.add_argument('--examples', type=int, default=100)
  parser.add_argument('--batch_size', type=int, default=20)
  parser.add_argument('--draws', type=int, default=200, help='tasks drawn per client')
  parser.add_argument(
    '--replicates',
    type=int,
    default=2000,
    help='one-draw-per-client epochs for the sampling-noise column',
  )
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()
  print(
    '| Model | Clients | Simulated p50 / p95 / p99 [s] | Paper Table 8 p50 / p95 / p99 [s] '
    '| Tasks | 5-95% range at one draw per client: p50 / p95 / p99 [s] |'
  )
  print('|---|---|---|---|---:|---|')
  for model in ('per_example', 'per_domain_per_example'):
    groups = simulate(
      model,
      num_clients=args.num_clients,
      num_stragglers=args.num_stragglers,
      examples=args.examples,
      batch_size=args.batch_size,
      draws=args.draws,
      seed=args.seed,
    )
    ranges = replicate_range(
      model,
      num_clients=args.num_clients,
      num_stragglers=args.num_stragglers,
      examples=args.examples,
      batch_size=args.batch_size,
      replicates=args.replicates,
      seed=args.seed + 1,
    )
    for group in ('standard', 'straggler'):
      ours = np.percentile(groups[group], PERCENTILES)
      paper = PAPER_TABLE_8[(model, group)]
      print(
        f'| {model} | {group} | {" / ".join(f"{v:.1f}" for v in ours)} | '
        f'{" / ".join(f"{v:g}" for v in paper)} | {groups[group].size:,} | '
        f'{" / ".join(f"{lo:.0f}-{hi:.0f}" for lo, hi in ranges[group].T)} |'
      )


if __name__ == '__main__':
  main()
