"""The task axis sharded over several devices gives the results of one device.

JAX fixes its device count at start-up, so the checks run in a subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=4` (four CPU devices).
"""

import os
import subprocess
import sys
import textwrap

import pytest

from fedsim_jax.config import ConfigError, base_config, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    import jax, numpy as np, optax
    from fedsim_jax.client import sgd_client_update
    from fedsim_jax.config import base_config
    from fedsim_jax.data.synthetic import toy_federation
    from fedsim_jax.executor import ClientTask, Executor
    from fedsim_jax.experiment import run_experiment
    from fedsim_jax.models import get_model

    assert jax.local_device_count() == 4, jax.devices()
    fed = toy_federation(num_clients=7)
    model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(16,))
    params = model.init(jax.random.PRNGKey(0))
    other = jax.tree_util.tree_map(lambda p: p + 0.01, params)
    update = sgd_client_update(model, optax.sgd(0.1), batch_size=4)
    tasks = [ClientTask(client_id=c, num_steps=1 + c % 3, seed=c,
                        start_params=params if c % 2 else other) for c in range(7)]
    results = {}
    for devices in (1, 4):
      executor = Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), devices=devices)
      result = executor.run(tasks)
      if devices == 4:
        assert len(result.deltas['Dense_0']['kernel'].sharding.device_set) == 4
      results[devices] = jax.device_get(result.deltas)
    for a, b in zip(jax.tree_util.tree_leaves(results[1]), jax.tree_util.tree_leaves(results[4])):
      np.testing.assert_allclose(a[:7], b[:7], atol=1e-6)

    metrics = {}
    for devices in (1, 4):
      config = base_config()
      config.model.kwargs.hidden_sizes = (16,)
      config.client.local_steps = 3
      config.client.batch_size = 4
      config.algorithm.kwargs.cohort_size = 5
      config.run.num_rounds = 3
      config.run.eval_every = 1
      config.executor.devices = devices
      workdir = tempfile.mkdtemp()
      run_experiment(config, workdir, dataset=fed)
      with open(os.path.join(workdir, 'metrics.jsonl')) as f:
        metrics[devices] = [json.loads(line) for line in f]
    for a, b in zip(metrics[1], metrics[4], strict=True):
      assert a['test_accuracy'] == b['test_accuracy'], (a, b)
      assert abs(a['test_loss'] - b['test_loss']) < 1e-5, (a, b)
    print('OK')
""")


def test_four_devices_give_the_results_of_one():
  # The script starts JAX before building the executors: it sizes XLA's thread pool itself.
  env = dict(
    os.environ,
    XLA_FLAGS='--xla_force_host_platform_device_count=4',
    JAX_PLATFORMS='cpu',
    PJRT_NPROC='8',
  )
  result = subprocess.run(
    [sys.executable, '-c', _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )
  assert result.returncode == 0 and 'OK' in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize(
  'backend, devices, message',
  [
    ('vmap', 0, 'executor.devices'),
    ('loop', 2, "devices > 1 with backend 'vmap'"),
  ],
)
def test_invalid_device_settings(backend, devices, message):
  config = base_config()
  config.executor.backend = backend
  config.executor.devices = devices
  with pytest.raises(ConfigError, match=message):
    validate(config)
