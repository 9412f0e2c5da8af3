"""CC-FedAvg (computation-customised FedAvg) reproduction kit: `tables` and the `reproduce`
binary."""
