"""fedsim's programs on XLA:CPU leave convolutions to XLA's own kernels (`choice.compiler_options`)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import choice
from fedsim_jax.experiment import run_experiment
from tests.helpers import make_tiny_config


def _conv(x, kernel):
  return jax.lax.conv_general_dilated(
    x, kernel, (1, 1), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC')
  )


def test_accelerators_get_no_options():
  assert choice.compiler_options('gpu') == {} and choice.compiler_options('tpu') == {}


def test_cpu_programs_compile_convolutions_outside_library_fusions():
  options = choice.compiler_options('cpu')
  if not options:
    pytest.skip('the installed jaxlib has no XLA:CPU library-fusion option')
  # The MNIST CNN's second convolution, which this jaxlib otherwise hands to a library fusion.
  x, kernel = jnp.ones((32, 12, 12, 32)), jnp.ones((5, 5, 32, 64))
  ours = choice.jit(_conv).lower(x, kernel).compile().as_text()
  assert re.search(r'ROOT \S+ = f32\[32,8,8,64\]\S* convolution\(', ours)  # XLA's own op
  assert 'kind=kCustom' not in ours
  np.testing.assert_allclose(choice.jit(_conv)(x, kernel), jax.jit(_conv)(x, kernel), rtol=1e-6)


def test_a_run_records_the_options_its_programs_were_compiled_with(tmp_path):
  fed = toy_federation(num_clients=4, num_classes=10, image_shape=(28, 28, 1))
  summary = run_experiment(make_tiny_config('fedavg'), tmp_path / 'run', dataset=fed)
  assert summary['host']['xla_options'] == choice.compiler_options()
