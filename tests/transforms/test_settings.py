"""Every setting of every attack, privacy mechanism, compressor and robust aggregator is checked:
a non-finite or negative number, or a value of the wrong type, is refused with one line naming
`<section>.kwargs.<field>` and its allowed values."""

import dataclasses

import pytest

from fedsim_jax.settings import ConfigError
from fedsim_jax.transforms.plugins import SECTIONS

pytestmark = pytest.mark.timeout(60)

FIELDS = [
  (section, entry.name, field.name)
  for section, registry in SECTIONS.items()
  for entry in registry
  for field in dataclasses.fields(entry.settings)
]


def test_every_section_has_settings_to_check():
  assert {section for section, _, _ in FIELDS} == set(SECTIONS)


@pytest.mark.parametrize(('section', 'name', 'field'), FIELDS, ids=lambda x: str(x))
@pytest.mark.parametrize('bad', [float('nan'), float('inf'), -1.0, 'many'], ids=str)
def test_a_bad_value_is_refused_naming_the_setting(section, name, field, bad):
  registry = SECTIONS[section]
  default = getattr(registry.get(name).settings(), field)
  if isinstance(default, bool) and bad == -1.0:
    bad = 2  # (booleans: a number that is not True or False)
  with pytest.raises(ConfigError, match=rf'^{section}\.kwargs\.{field}=.*allowed'):
    registry.resolve(name, {field: bad})
