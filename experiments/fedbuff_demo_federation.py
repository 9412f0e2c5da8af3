"""FedBuff on the demo's federation: the README's comparison with the demo's FedAvg.

  fedsim-run --config=experiments/fedbuff_demo_federation.py --config.data.data_dir=data \
      --workdir=runs/fedbuff_demo

Everything but the algorithm is the demo's (`fedsim_jax.configs.fedavg_fashion_mnist`): the
same 100 clients (Dirichlet 0.5), latency model (per-step times from N(0.1 s, (0.03 s)^2), 5%
per-task jitter), local work (20 SGD steps of B = 32 at 0.05), model, seed and evaluation
schedule. The server rule is the shipped FedBuff config's (K = 10 updates per version, scaled by
(staleness + 1)^-0.5, server SGD at 1.0), with 10 tasks in flight, as many clients training at
once as the demo's cohort; its 300 versions take as many client updates as the demo's 300
rounds (3,000).
"""

from fedsim_jax.configs import fedavg_fashion_mnist, fedbuff_fashion_mnist

DEMO_COHORT = fedavg_fashion_mnist.get_config().algorithm.kwargs.cohort_size


def get_config():
  config = fedavg_fashion_mnist.get_config()
  config.algorithm = fedbuff_fashion_mnist.get_config().algorithm
  config.algorithm.kwargs.concurrency = DEMO_COHORT
  return config
