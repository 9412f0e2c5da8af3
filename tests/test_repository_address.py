"""The repository's address is defined once, `[project.urls] Repository` in pyproject.toml, and
every Colab badge, `git+` install, GitHub link and archive name in the README, the notebooks and
CITATION.cff follows it."""

import glob
import json
import os
import re

import pytest
import tomllib
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The files that point at the repository: the README, the notebooks and their README.
DOCUMENTS = sorted(
  [os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'notebooks', 'README.md')]
  + glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb'))
)
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb')))


def _project():
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)['project']


def _repository() -> str:
  return _project()['urls']['Repository']


def _text(path: str) -> str:
  """A markdown file's text, or a notebook's cell sources (its outputs are not addresses)."""
  with open(path, encoding='utf-8') as f:
    if not path.endswith('.ipynb'):
      return f.read()
    return '\n'.join(''.join(cell['source']) for cell in json.load(f)['cells'])


def _colab_prefix(repository: str) -> str:
  """Colab's address of the repository's notebooks folder on its main branch."""
  path = repository.removeprefix('https://github.com/')
  return f'https://colab.research.google.com/github/{path}/blob/main/notebooks/'


def test_pyproject_names_a_github_repository():
  assert re.fullmatch(r'https://github\.com/[\w.-]+/[\w.-]+', _repository()), _repository()


def test_the_citation_carries_the_repository_address():
  with open(os.path.join(ROOT, 'CITATION.cff'), encoding='utf-8') as f:
    assert yaml.safe_load(f)['repository-code'] == _repository()


@pytest.mark.parametrize('path', DOCUMENTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_address_in_the_docs_is_the_repository(path):
  repository = _repository()
  text = _text(path)
  assert '<repository URL>' not in text
  for install in re.findall(r'git\+([^\s\'"`)]+)', text):
    assert install == repository, f'git+{install}'
  for owner_and_name in re.findall(r'github\.com/([\w.-]+/[\w.-]+)', text):
    assert f'https://github.com/{owner_and_name}' == repository, owner_and_name
  for badge in re.findall(r'https://colab\.research\.google\.com/github/[^\s)]+', text):
    assert badge.startswith(_colab_prefix(repository)), badge
  for version in re.findall(r'fedsim_jax-([^\s/\'"`]+?)\.tar\.gz', text):
    assert version in (_project()['version'], '<version>'), version


@pytest.mark.parametrize('path', NOTEBOOKS, ids=os.path.basename)
def test_each_notebook_opens_itself_and_installs_from_the_repository_or_an_archive(path):
  name = os.path.basename(path)
  with open(path, encoding='utf-8') as f:
    cells = json.load(f)['cells']
  badge, setup = ''.join(cells[0]['source']), ''.join(cells[1]['source'])
  assert f'({_colab_prefix(_repository())}{name})' in badge
  assert f"PACKAGE = 'git+{_repository()}'" in setup
  assert "[sys.executable, '-m', 'pip', 'install', '-q', PACKAGE]" in setup
  # Until the repository is public: how to install from a checkout or its archive.
  assert 'fedsim_jax-<version>.tar.gz' in setup and 'pip install /path/to/fedsim_jax' in setup
