"""FedASMU (Liu et al., AAAI 2024) reproduction kit: `tables` and the `reproduce` binary."""
