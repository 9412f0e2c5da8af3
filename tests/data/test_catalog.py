"""The dataset catalog: every entry loads from a generated data dir with its real features.

No test downloads. Datasets that cannot be had offline are written here with the features of
`catalog.feature_schema` (tfds's own features for tfds datasets) by `prepare.write_examples`,
then read back through `load_dataset`, the one loader path.
"""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow_datasets as tfds

from fedsim_jax.data import catalog, text
from fedsim_jax.data.errors import DatasetNotFoundError
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.data.prepare import prepare, prepare_from_tfds, write_data_dir, write_examples

REPO_ROOT = Path(__file__).resolve().parents[2]
HAS_PIL = importlib.util.find_spec('PIL') is not None
NUM_EXAMPLES = {'train': 5, 'test': 3}
CLIENT_NAMES = ('client_a', 'client_b')
WORDS = ('the', 'film', 'was', 'good', 'bad', 'plot', 'actors', 'sort', 'list', 'python')


def _png(image: np.ndarray) -> bytes:
  """A PNG file of a uint8 [H, W, C] image (C = 1 or 3), unfiltered: no Pillow needed."""
  height, width, channels = image.shape
  rows = b''.join(b'\x00' + image[row].tobytes() for row in range(height))

  def chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + tag + data + struct.pack('>I', zlib.crc32(tag + data))

  header = struct.pack('>IIBBBBB', width, height, 8, {1: 0, 3: 2}[channels], 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(rows))
          + chunk(b'IEND', b''))  # fmt: skip


def _value(feature: Any, key: str, index: int, rng: np.random.Generator) -> tuple[Any, Any]:
  """(value written, value the loader should return) for one feature of one example."""
  if isinstance(feature, tfds.features.Image):
    image = rng.integers(0, 256, feature.shape, np.uint8)
    return _png(image), image
  if isinstance(feature, tfds.features.ClassLabel):
    return index % feature.num_classes, index % feature.num_classes
  if isinstance(feature, tfds.features.Text):
    if key == 'tags':
      return 'math|python', 'math|python'
    sentence = ' '.join(rng.choice(WORDS, size=int(rng.integers(3, 9))))
    return sentence, sentence
  dtype = np.dtype(feature.np_dtype)
  if np.issubdtype(dtype, np.floating):
    array = rng.standard_normal(feature.shape).astype(dtype)
  else:
    array = rng.integers(0, 2 if key == 'mask' else 82, feature.shape).astype(dtype)
  return array, array


def _generated_dir(name: str, data_dir: Path, client_names: tuple[str, ...] | None) -> dict:
  """Writes a small dir of dataset `name`; returns split -> feature -> expected values."""
  features = catalog.feature_schema(name, client_names)
  rng = np.random.default_rng(0)
  written: dict[str, list[dict]] = {}
  expected: dict[str, dict[str, list]] = {}
  for split, count in NUM_EXAMPLES.items():
    written[split], expected[split] = [], {key: [] for key in features}
    for i in range(count):
      example = {}
      for key, feature in features.items():
        example[key], value = _value(feature, key, i, rng)
        expected[split][key].append(value)
      written[split].append(example)
  write_examples(name, data_dir, written, client_names=client_names)
  return expected


def _uses_image_feature(name: str) -> bool:
  features = catalog.feature_schema(name)
  return isinstance(features[catalog.DATASETS[name].input_key], tfds.features.Image)


def test_catalog_entries_are_complete() -> None:
  assert set(catalog.DATASETS) == {
      'fashion_mnist', 'mnist', 'digits', 'cifar10', 'cifar100', 'emnist', 'imdb_reviews',
      'shakespeare', 'stackoverflow', 'tiny_imagenet', 'flamby_isic2019', 'flamby_ixi',
  }  # fmt: skip
  for name, spec in catalog.DATASETS.items():
    assert spec.name == name and spec.kind in catalog.KINDS and spec.how_to_prepare
    assert (spec.tokenizer is not None) == (name in ('imdb_reviews', 'stackoverflow'))
    features = catalog.feature_schema(name)
    assert spec.input_key in features, name
    assert spec.label_key is None or spec.label_key in features, name
    label = features[spec.label_key] if spec.label_key is not None else None
    if isinstance(label, tfds.features.ClassLabel):
      assert label.num_classes == spec.num_classes, name
  offline = {n for n, s in catalog.DATASETS.items() if s.offline_source}
  assert offline == {'fashion_mnist', 'mnist', 'digits', 'shakespeare'}
  assert catalog.DATASETS['emnist'].tfds_name == 'emnist/byclass'
  assert catalog.DATASETS['emnist'].num_classes == 62


@pytest.mark.parametrize('name', list(catalog.DATASETS))
def test_loader_reads_generated_dir(name: str, tmp_path: Path) -> None:
  spec = catalog.DATASETS[name]
  client_names = CLIENT_NAMES if spec.client_id_key is not None else None
  expected = _generated_dir(name, tmp_path, client_names)
  if _uses_image_feature(name) and not HAS_PIL:
    with pytest.raises(ImportError, match=r'needs Pillow \(pip install pillow\)$'):
      load_dataset(name, tmp_path)
    return
  loaded = load_dataset(name, tmp_path)
  assert loaded.name == name and loaded.kind == spec.kind
  for split in NUM_EXAMPLES:
    x, y = getattr(loaded, f'{split}_x'), getattr(loaded, f'{split}_y')
    assert len(x) == len(y) == NUM_EXAMPLES[split]
    if spec.tokenizer is None:
      np.testing.assert_array_equal(x, np.stack(expected[split][spec.input_key]))
    if spec.label_key is not None:
      np.testing.assert_array_equal(y, np.stack(expected[split][spec.label_key]))
    if spec.client_id_key is not None:
      ids = getattr(loaded, f'{split}_client_ids')
      np.testing.assert_array_equal(ids, np.arange(NUM_EXAMPLES[split]) % 2)
      assert ids.dtype == np.int32
    for key in spec.extra_keys:
      np.testing.assert_array_equal(
        getattr(loaded, f'{split}_extras')[key], np.asarray(expected[split][key])
      )
  assert loaded.client_names == client_names
  assert loaded.num_classes == spec.num_classes
  if spec.kind == catalog.IMAGE:
    assert loaded.train_x.dtype == np.uint8 and loaded.train_x.ndim == 4
    assert loaded.train_y.dtype == np.int32 and loaded.train_y.ndim == 1
  elif spec.kind in (catalog.TEXT, catalog.SEQUENCE):
    assert loaded.train_x.dtype == np.int32 and loaded.vocabulary is not None
    assert loaded.train_x.shape[1] == (spec.tokenizer.length if spec.tokenizer else 80)
  else:
    assert loaded.train_x.dtype == np.float32 and loaded.train_y.dtype == np.uint8


def test_imdb_word_tokenisation(tmp_path: Path) -> None:
  train = ['Good film.<br /><br />GOOD plot', "the film wasn't good", 'bad ' * 300]
  test = ['good unseen words']
  write_examples('imdb_reviews', tmp_path, {
      'train': [{'text': t, 'label': i % 2} for i, t in enumerate(train)],
      'test': [{'text': t, 'label': 1} for t in test],
  })  # fmt: skip
  loaded = load_dataset('imdb_reviews', tmp_path)
  # Counts: bad 300, good 3, film 2, then plot / the / wasn't once each (ties alphabetical).
  assert loaded.vocabulary == ('<pad>', '<oov>', 'bad', 'good', 'film', 'plot', 'the', "wasn't")
  length = catalog.DATASETS['imdb_reviews'].tokenizer.length
  assert loaded.train_x.shape == (3, length) and loaded.test_x.shape == (1, length)
  np.testing.assert_array_equal(loaded.train_x[0, :5], [3, 4, 3, 5, 0])
  np.testing.assert_array_equal(loaded.train_x[1, :5], [6, 4, 7, 3, 0])
  assert (loaded.train_x[2] == 2).all()  # 300 words cut to the first 256.
  np.testing.assert_array_equal(loaded.test_x[0, :4], [3, 1, 1, 0])  # Unseen words: OOV.
  np.testing.assert_array_equal(loaded.train_y, [0, 1, 0])


def test_stackoverflow_next_word_targets(tmp_path: Path) -> None:
  long = ' '.join(['python'] * 30)
  write_examples('stackoverflow', tmp_path, {
      'train': [{'tokens': 'how to sort a list', 'tags': 'python', 'client_id': 0},
                {'tokens': long, 'tags': 'math|c++', 'client_id': 1}],
      'test': [{'tokens': 'sort a dict', 'tags': 'python', 'client_id': 1}],
  }, client_names=['user_1', 'user_2'])  # fmt: skip
  loaded = load_dataset('stackoverflow', tmp_path)
  vocab = loaded.vocabulary
  assert vocab[:6] == ('<pad>', '<oov>', '<bos>', '<eos>', 'python', 'a')
  ids = {w: vocab.index(w) for w in ('how', 'to', 'sort', 'a', 'list', 'python')}
  assert loaded.train_x.shape == loaded.train_y.shape == (2, 20)
  np.testing.assert_array_equal(  # [bos, words, eos, pad...]: eos is an input too, as in TFF.
    loaded.train_x[0, :8], [2, ids['how'], ids['to'], ids['sort'], ids['a'], ids['list'], 3, 0]
  )
  np.testing.assert_array_equal(
    loaded.train_y[0, :7], [ids['how'], ids['to'], ids['sort'], ids['a'], ids['list'], 3, 0]
  )
  np.testing.assert_array_equal(loaded.train_x[1], [2] + [ids['python']] * 19)  # Cut, no EOS.
  np.testing.assert_array_equal(loaded.train_y[1], [ids['python']] * 20)
  np.testing.assert_array_equal(loaded.test_x[0, :6], [2, ids['sort'], ids['a'], 1, 3, 0])
  np.testing.assert_array_equal(loaded.train_client_ids, [0, 1])
  assert loaded.client_names == ('user_1', 'user_2')
  np.testing.assert_array_equal(loaded.train_extras['tags'], ['python', 'math|c++'])


@pytest.mark.parametrize('client_feature', ['int', 'text'])
def test_client_ids_without_names(client_feature: str, tmp_path: Path) -> None:
  """Converted dirs may store client ids as plain integers or as strings (TFF client ids)."""
  feature = tfds.features.Scalar(np.int64) if client_feature == 'int' else tfds.features.Text()
  features = tfds.features.FeaturesDict({
      'image': tfds.features.Tensor(shape=(2, 2, 1), dtype=np.uint8),
      'label': tfds.features.ClassLabel(num_classes=62),
      'client_id': feature,
  })  # fmt: skip
  values = {'train': [7, 3, 7], 'test': [3]}
  if client_feature == 'text':
    values = {'train': ['f07', 'f03', 'f07'], 'test': ['f03']}
  splits = {
    split: [{'image': np.zeros((2, 2, 1), np.uint8), 'label': 1, 'client_id': v} for v in vs]
    for split, vs in values.items()
  }
  write_data_dir(tmp_path, 'emnist/byclass', '9.0.0', features, splits)
  loaded = load_dataset('emnist', tmp_path)
  if client_feature == 'int':
    np.testing.assert_array_equal(loaded.train_client_ids, [7, 3, 7])
    assert loaded.client_names is None
  else:
    np.testing.assert_array_equal(loaded.train_client_ids, [1, 0, 1])
    np.testing.assert_array_equal(loaded.test_client_ids, [0])
    assert loaded.client_names == ('f03', 'f07')


def test_dataset_outside_catalog_loads_as_images(tmp_path: Path) -> None:
  features = tfds.features.FeaturesDict({
      'image': tfds.features.Tensor(shape=(3, 3, 1), dtype=np.uint8),
      'label': tfds.features.ClassLabel(num_classes=4),
  })  # fmt: skip
  example = {'image': np.ones((3, 3, 1), np.uint8), 'label': 2}
  write_data_dir(tmp_path, 'my_images', '1.0.0', features, {'train': [example], 'test': [example]})
  loaded = load_dataset('my_images', tmp_path)
  assert loaded.kind == 'image' and loaded.num_classes == 4 and loaded.train_client_ids is None


@pytest.mark.parametrize('name', list(catalog.DATASETS))
def test_missing_dataset_reads_nothing_and_says_how_to_prepare(
  name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  from fedsim_jax.data import loading

  def read(*args: Any) -> None:
    raise AssertionError('a dataset that is not prepared was read')

  # Refused before any reading or decoding (its time: benchmarks/data_loading.py).
  monkeypatch.setattr(loading, '_decode', read)
  monkeypatch.setattr(loading.manifest, 'verify', read)
  with pytest.raises(DatasetNotFoundError) as info:
    load_dataset(name, tmp_path)
  message = str(info.value)
  assert '\n' not in message and str(tmp_path) in message
  spec = catalog.DATASETS[name]
  if spec.offline_source:
    assert f'python -m fedsim_jax.data.prepare --dataset={name} --data_dir={tmp_path}' in message
  elif spec.tfds_name is not None:
    assert f'--dataset={name} --from_tfds --data_dir={tmp_path}' in message
  else:
    assert f'feature_schema({name!r})' in message


def test_prepare_never_downloads_unless_asked(tmp_path: Path) -> None:
  with pytest.raises(ValueError, match='no offline source.*--from_tfds'):
    prepare('cifar10', tmp_path)
  with pytest.raises(ValueError, match='allowed: fashion_mnist, mnist'):
    prepare('cifar', tmp_path)
  with pytest.raises(ValueError, match='not in the tfds catalog'):
    prepare('stackoverflow', tmp_path, from_tfds=True)
  assert not any(tmp_path.iterdir())


def test_from_tfds_runs_the_tfds_builder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
  """`--from_tfds` hands over to tfds (faked here: no network in tests)."""
  calls = []

  class FakeBuilder:
    data_path = tmp_path / 'emnist' / 'byclass' / '3.1.0'

    def download_and_prepare(self, download_config: Any) -> None:
      calls.append(download_config.download_mode)

  def fake_builder(name: str, **kwargs: Any) -> FakeBuilder:
    calls.append((name, kwargs))
    return FakeBuilder()

  monkeypatch.setattr(tfds, 'builder', fake_builder)
  assert prepare('emnist', tmp_path, from_tfds=True) == FakeBuilder.data_path
  assert calls == [
    ('emnist/byclass', {'data_dir': str(tmp_path), 'file_format': 'array_record'}),
    tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS,
  ]
  FakeBuilder.data_path.mkdir(parents=True)
  (FakeBuilder.data_path / 'dataset_info.json').write_text('{}')
  calls.clear()
  assert prepare_from_tfds('emnist', tmp_path) == FakeBuilder.data_path
  assert len(calls) == 1  # Already prepared: not downloaded again.


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run(
      [sys.executable, '-m', 'fedsim_jax.data.prepare', *args],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
  )  # fmt: skip


@pytest.mark.parametrize(
  ('args', 'message'),
  [
    (['--dataset=cifar10'], '--dataset=cifar10 --from_tfds'),
    (['--dataset=stackoverflow', '--from_tfds'], '--from_tfds needs --dataset in'),
  ],
)
def test_cli_refuses_datasets_without_offline_source(
  args: list[str], message: str, tmp_path: Path
) -> None:
  result = _cli(*args, f'--data_dir={tmp_path}')
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and message in lines[0]
  assert not any(tmp_path.iterdir())


def test_word_helpers() -> None:
  assert text.words("It's <br/>GREAT, isn't it?") == ["it's", 'great', "isn't", 'it']
  vocab = text.word_vocabulary([['b', 'a'], ['b', 'c']], size=4, reserved=('<pad>', '<oov>'))
  assert vocab == ('<pad>', '<oov>', 'b', 'a')
  ids = text.encode_words([['a', 'c'], ['b'] * 5], vocab, length=3, prefix=(9,))
  np.testing.assert_array_equal(ids, [[9, 3, 1], [9, 2, 2]])
