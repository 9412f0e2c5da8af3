"""FedCompass (Li et al., ICLR 2024) reproduction kit: `tables` and the `reproduce` binary."""
