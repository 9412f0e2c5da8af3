"""The straggler methods: FARe-DUST (`fare_dust`, Algorithms 1 and 3) and FeAST-on-MSG
(`feast_msg`, Algorithm 2), each its settings, scheduler, aggregator and registered factory."""

from fedsim_jax.algorithms.stragglers.fare_dust import FareDustSettings, fare_dust_algorithm
from fedsim_jax.algorithms.stragglers.feast_msg import FeastSettings, feast_msg_algorithm

__all__ = ['FareDustSettings', 'fare_dust_algorithm', 'FeastSettings', 'feast_msg_algorithm']
