"""docs/index.md links every page of docs/, so none is reachable only through the folder."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_docs_index_links_every_page():
  index = (ROOT / 'docs' / 'index.md').read_text(encoding='utf-8')
  linked = set(re.findall(r'\]\(([^)#]+\.md)\)', index))
  pages = {
    str(path.relative_to(ROOT / 'docs'))
    for path in (ROOT / 'docs').rglob('*.md')
    if path.name != 'index.md'
  }
  assert pages == linked, (sorted(pages - linked), sorted(linked - pages))
  for page in linked:  # every link resolves
    assert (ROOT / 'docs' / page).is_file(), page
