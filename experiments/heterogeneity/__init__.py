"""The heterogeneity study: the baselines FL papers compare against (SCAFFOLD, FedNova, q-FFL,
Ditto, FedBN), measured per client on strongly non-IID Fashion-MNIST: `setups`, `tables` and
the `reproduce` binary."""
