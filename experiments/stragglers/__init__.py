"""Learning from straggler clients (Hard et al.) reproduction kit: `tables` and the `reproduce`
binary."""
