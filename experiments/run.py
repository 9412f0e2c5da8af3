"""Runs one federated experiment from a config, or several seeds of it: `fedsim-run` from a
checkout (the command is `fedsim_jax/run.py`; its docstring lists the flags and exit codes).

  python experiments/run.py --config=configs/fedavg_fashion_mnist.py --workdir=runs/demo \
      --config.client.learning_rate=0.1 --config.algorithm.kwargs.cohort_size=20
  python experiments/run.py --config=fedsim_jax.configs.fedcompass_mnist --seeds=0,1,2,3
"""

from fedsim_jax.run import run_main

if __name__ == '__main__':
  run_main()
