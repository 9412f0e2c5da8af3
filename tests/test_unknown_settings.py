"""Every unknown setting is one line and exit 2 before anything is written: an unknown section,
an unknown field of any section, an unknown algorithm setting, and a setting of an earlier
version, which names its new place."""

import os
import subprocess
import sys

import ml_collections
import pytest

from fedsim_jax import config as config_lib
from fedsim_jax.config import ConfigError, check_override_path, moved_setting

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BINARY = os.path.join(_REPO, 'experiments', 'run.py')
_FEDBUFF = os.path.join(_REPO, 'configs', 'fedbuff_fashion_mnist.py')


def _run(*flags):
  return subprocess.run(
    [sys.executable, _BINARY, *flags], capture_output=True, text=True, cwd=_REPO, timeout=180
  )


def _one_error_line(result):
  assert 'Traceback' not in result.stderr, result.stderr[-2000:]
  lines = [line for line in result.stderr.splitlines() if not line.startswith(('I', 'W'))]
  assert len(lines) == 1, result.stderr[-2000:]
  assert lines[0].startswith('error: ')
  return lines[0]


@pytest.mark.parametrize(
  'override, expected',
  [
    # A section of an earlier version: the setting's new place.
    (
      '--config.scheduler.concurrency=20',
      'scheduler.concurrency is not a setting; it is now algorithm.kwargs.concurrency',
    ),
    (
      '--config.server.learning_rate=0.5',
      'server.learning_rate is not a setting; it is now algorithm.kwargs.server_learning_rate',
    ),
    ('--config.fedasmu_fetch.policy=meta', 'it is now algorithm.kwargs.fetch_policy'),
    # Model, latency and availability settings of an earlier layout: the selected one's.
    ('--config.latency.model=lognormal', 'latency.model is not a setting; it is now latency.name'),
    (
      '--config.latency.per_step.mean=2',
      'latency.per_step.mean is not a setting; it is now latency.kwargs.mean: the settings of '
      'the latency model that latency.name names',
    ),
    ('--config.latency.lognormal.model=x', 'it is now latency.kwargs.model: the settings of'),
    (
      '--config.availability.model=periodic',
      'availability.model is not a setting; it is now availability.name',
    ),
    ('--config.availability.periodic.period=60', 'it is now availability.kwargs.period: the'),
    (
      '--config.model.hidden_sizes=(16,)',
      'model.hidden_sizes is not a setting; it is now model.kwargs.hidden_sizes: the settings of '
      'the model that model.name names',
    ),
    ('--config.model.norm=group', 'model.norm is not a setting; it is now model.kwargs.norm'),
    # An unknown section, with did-you-mean and what exists.
    ('--config.clent.batch_size=4', "clent is not a setting (did you mean 'client'?); allowed: ["),
    (
      '--config.algorithm.kwarg.concurrency=5',
      "algorithm.kwarg is not a setting (did you mean 'kw",
    ),
    ('--config.latency.kwarg.mean=2', "latency.kwarg is not a setting (did you mean 'kwargs'?)"),
    ('--config.seed.value=1', 'seed.value is not a setting: seed is a setting (seed=0), not a'),
    # An unknown field of a section.
    ('--config.client.learnin_rate=0.1', "client.learnin_rate is not a setting (did you mean 'lea"),
    ('--config.run.num_round=3', "run.num_round is not a setting (did you mean 'num_rounds'?)"),
    ('--config.run.num_round=None', "run.num_round is not a setting (did you mean 'num_rounds'?)"),
    # An unknown setting of the algorithm.
    (
      '--config.algorithm.kwargs.concurency=20',
      "algorithm.kwargs.concurency is not a setting of FedBuffSettings (did you mean 'concurrency'",
    ),
  ],
)
def test_unknown_settings_are_one_line_and_exit_2(tmp_path, override, expected):
  workdir = tmp_path / 'run'
  result = _run(f'--config={_FEDBUFF}', f'--workdir={workdir}', override)
  assert result.returncode == 2
  assert expected in _one_error_line(result)
  assert not workdir.exists()


def test_a_config_file_with_a_section_of_an_earlier_version_names_the_new_places(tmp_path):
  path = tmp_path / 'old_config.py'
  path.write_text(
    'from fedsim_jax.config import base_config\n'
    'import ml_collections\n\n\n'
    'def get_config():\n'
    '  c = base_config()\n'
    "  c.algorithm.name = 'fedbuff'\n"
    '  c.scheduler = ml_collections.ConfigDict({"concurrency": 20, "buffer_size": 5})\n'
    '  return c\n'
  )
  result = _run(f'--config={path}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 2
  line = _one_error_line(result)
  assert 'scheduler is not a setting; it is now algorithm.kwargs' in line
  assert 'scheduler.concurrency -> algorithm.kwargs.concurrency' in line
  assert 'scheduler.buffer_size -> algorithm.kwargs.buffer_size' in line
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize(
  'lines, expected',
  [
    (
      ["c.latency.model = 'device_ratio'"],
      'latency.model is not a setting; it is now latency.name',
    ),
    (
      ['c.latency.lognormal = ml_collections.ConfigDict({"model": "per_example"})'],
      'latency.lognormal is not a setting; it is now latency.kwargs (latency.lognormal.model -> '
      'latency.kwargs.model): the settings of the latency model',
    ),
    (
      ['c.model.hidden_sizes = (16,)'],
      'model.hidden_sizes is not a setting; it is now model.kwargs.hidden_sizes',
    ),
    (  # reading a section that is gone fails in get_config itself
      ['c.latency.per_step.mean = 2.0'],
      "latency.per_step.<field> is now latency.kwargs.<field> (with latency.name='per_step')",
    ),
  ],
)
def test_a_config_file_with_a_model_or_latency_setting_of_an_earlier_layout_names_the_new_place(
  tmp_path, lines, expected
):
  path = tmp_path / 'old_config.py'
  body = ''.join(f'  {line}\n' for line in lines)
  path.write_text(
    'from fedsim_jax.config import base_config\n'
    'import ml_collections\n\n\n'
    f'def get_config():\n  c = base_config()\n{body}  return c\n'
  )
  result = _run(f'--config={path}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 2
  assert expected in _one_error_line(result)
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize(
  'path, new',
  [
    ('latency.model', 'latency.name'),
    ('latency.per_step.mean', 'latency.kwargs.mean'),
    ('latency.device_ratio.fastest_step_time', 'latency.kwargs.fastest_step_time'),
    ('latency.fedscale', 'latency.kwargs'),
    ('availability.model', 'availability.name'),
    ('availability.trace.trace', 'availability.kwargs.trace'),
    ('model.hidden_sizes', 'model.kwargs.hidden_sizes'),
    ('model.norm', 'model.kwargs.norm'),
    ('latency.kwargs.mean', None),
    ('scheduler.concurrency', 'algorithm.kwargs.concurrency'),
    ('scheduler.q_min', 'algorithm.kwargs.q_min'),
    ('server.optimizer', 'algorithm.kwargs.server_optimizer'),
    ('server.fedasync_form', 'algorithm.kwargs.form'),
    ('budget.rule', 'algorithm.kwargs.budget_rule'),
    ('budget.phase', 'algorithm.kwargs.phase'),
    ('fedasmu_fetch.hidden_size', 'algorithm.kwargs.fetch_hidden_size'),
    ('moon.mu', 'algorithm.kwargs.mu'),
    ('scheduler', 'algorithm.kwargs'),
    ('scheduler.not_a_field', 'algorithm.kwargs'),  # the section's new place only
    ('client.learning_rate', None),
    ('schedulers.concurrency', None),
  ],
)
def test_moved_setting(path, new):
  assert moved_setting(path) == new


def test_every_moved_setting_is_a_setting_of_a_registered_algorithm():
  import dataclasses

  from fedsim_jax import algorithms

  fields = {
    f.name
    for name in algorithms.names()
    for f in dataclasses.fields(algorithms.get_spec(name).settings)
  }
  for section, old in config_lib.MOVED_SECTIONS.items():
    for field in old.split():
      new = moved_setting(f'{section}.{field}')
      assert new.removeprefix('algorithm.kwargs.') in fields, (section, field, new)


@pytest.mark.parametrize(
  'path',
  [
    'client.learning_rate',
    'algorithm.kwargs.anything',  # checked by the algorithm
    'run.eval_class_groups.stragglers',
    'latency.kwargs.mean',  # checked by the latency model
    'latency.kwargs.speed',  # (a latency model of a user module may have it)
    'model.kwargs.width',
    'availability.kwargs.period',
    'client',
  ],
)
def test_paths_that_may_be_overridden(path):
  check_override_path(path)


def test_an_override_is_checked_against_the_given_reference():
  reference = ml_collections.ConfigDict({'a': ml_collections.ConfigDict({'b': 1})})
  check_override_path('a.b', reference)
  with pytest.raises(ConfigError, match=r"^a\.c is not a setting; allowed: \['a\.b'\]$"):
    check_override_path('a.c', reference)
