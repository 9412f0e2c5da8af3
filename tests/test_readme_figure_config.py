"""The README's FedAvg-against-FedBuff figure compares like with like: its FedBuff config is the
demo's in every section but the algorithm."""

from experiments import fedbuff_demo_federation
from fedsim_jax.configs import fedavg_fashion_mnist, fedbuff_fashion_mnist


def test_the_fedbuff_run_differs_from_the_demo_only_in_its_algorithm():
  demo = fedavg_fashion_mnist.get_config().to_dict()
  fedbuff = fedbuff_demo_federation.get_config().to_dict()
  assert fedbuff.pop('algorithm') != demo.pop('algorithm')
  assert fedbuff == demo


def test_its_server_rule_is_the_shipped_fedbuffs_with_the_demos_cohort_in_flight():
  algorithm = fedbuff_demo_federation.get_config().algorithm.to_dict()
  shipped = fedbuff_fashion_mnist.get_config().algorithm.to_dict()
  cohort = fedavg_fashion_mnist.get_config().algorithm.kwargs.cohort_size
  assert algorithm['kwargs'].pop('concurrency') == cohort
  assert shipped['kwargs'].pop('concurrency') == 100
  assert algorithm == shipped
