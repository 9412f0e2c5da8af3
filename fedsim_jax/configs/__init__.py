"""The shipped experiment configs: one module per experiment, each with a `get_config()`.

Run one by module name, installed or not, or by file from a checkout (`configs/` there is a
link to this folder)::

  fedsim-run --config=fedsim_jax.configs.fedavg_fashion_mnist --workdir=runs/demo
  python experiments/run.py --config=configs/fedavg_fashion_mnist.py --workdir=runs/demo

Every field can be overridden with `--config.<section>.<field>=value`. The configs start from
`fedsim_jax.config` (`base_config`, `fashion_mnist_config`, `fedasmu_fashion_mnist_config`)
and import nothing else.

  fedavg_fashion_mnist                  the demo: FedAvg, 100 clients (Dirichlet 0.5), MLP
  fedadam_fashion_mnist                 FedAdam on the demo's federation
  fedavg_mnist_cnn                      FedAvg with the FedCompass MNIST CNN, shards partition
  fedavg_overselection_fashion_mnist    FedAvg with over-selection, log-normal latency
  fedavg_time_limited_fashion_mnist     FedAvg with the 75th-percentile time limit
  fedavg_shakespeare                    FedAvg, character LSTM, one client per speaking role
  fedasync_fashion_mnist                FedAsync, 10 in flight
  fedbuff_fashion_mnist                 FedBuff, 1,000 clients, 100 in flight, K = 10
  fedbuff_stragglers_fashion_mnist      FedBuff + EMA + KD + L2 under log-normal latency
  fedat_fashion_mnist                   FedAT, speed tiers within a factor v = 2
  fedcompass_mnist                      FedCompass on MNIST with the paper's CNN, 5 clients
  ccfedavg_fashion_mnist                CC-FedAvg, Table II setting (two classes per client)
  fare_dust_fashion_mnist               FARe-DUST (the straggler paper)
  feast_msg_fashion_mnist               FeAST-on-MSG (the straggler paper)
  fedadam_overselection_fashion_mnist   FedAdam with over-selection (the straggler paper)
  fedasmu_fashion_mnist                 FedASMU: LeNet-5, 100 devices, periodic trigger
                                        (`:appendix` selects the appendix's trigger)
  fedasmu_{0,da,fa,h1,h2,h3}_fashion_mnist   FedASMU's ablations
  {fedprox,moon,feddyn,port,asofed,fedsa}_fashion_mnist   FedASMU's baselines

`traces/example_trace.json` is an example of the `trace` latency model's file (per-client
speeds and online windows).
"""
