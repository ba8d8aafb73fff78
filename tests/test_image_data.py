"""Image datasets on real files (PNG folders, list files, CIFAR's pickle layout) and TRANSFORMS in the loader."""

import os
import pickle
import random

import numpy as np
import pytest
import torch
from image_support import write_cifar10, write_png_folder
from PIL import Image

from scepter_like.config import Config
from scepter_like.data.loader import build_data
from scepter_like.data.registry import DATASETS
from scepter_like.data.transformed import sample_random
from scepter_like.errors import ConfigError, DataError
from scepter_like.utils.distributed import DistInfo

TRAIN_TRANSFORMS = [
    {'NAME': 'RandomResizedCrop', 'SIZE': 12, 'SCALE': [0.5, 1.0]},
    {'NAME': 'RandomHorizontalFlip'},
    {'NAME': 'ImageToTensor'},
    {'NAME': 'Normalize', 'MEAN': [0.5, 0.5, 0.5], 'STD': [0.25, 0.25, 0.25]},
    {'NAME': 'Select', 'KEYS': ['img', 'label']},
]


def data_cfg(**keys):
    return Config({'SOLVER': {'TRAIN_DATA': keys}}).SOLVER.TRAIN_DATA


def bundle(cfg, mode='train', seed=7):
    return build_data(cfg, mode, DistInfo(), seed)


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp('pngs')
    return str(root), write_png_folder(str(root), classes=3, per_class=4)


def test_image_folder_gives_decoded_images_and_labels_by_sorted_class(folder):
    root, samples = folder
    ds = DATASETS.build({'NAME': 'ImageFolderDataset', 'DATA_ROOT': root})
    assert ds.classes == ['class_0', 'class_1', 'class_2'] and len(ds) == 12
    item = ds[5]
    path, label = samples[5]
    assert item['label'] == label and item['meta'] == {'img_path': path}
    assert np.array_equal(np.asarray(item['img']), np.asarray(Image.open(path)))


def test_image_list_reads_path_label_lines(folder, tmp_path):
    root, samples = folder
    lines = ['# path label', ''] + [f'{os.path.relpath(p, root)} {label}' for p, label in samples[::-1]]
    (tmp_path / 'list.txt').write_text('\n'.join(lines) + '\n')
    ds = DATASETS.build({'NAME': 'ImageListDataset', 'LIST_FILE': str(tmp_path / 'list.txt'), 'DATA_ROOT': root})
    assert len(ds) == 12 and ds[0]['label'] == samples[-1][1]
    assert np.array_equal(np.asarray(ds[0]['img']), np.asarray(Image.open(samples[-1][0])))


@pytest.mark.parametrize('bad', ['no label', 'missing file'])
def test_a_bad_list_line_is_one_error_at_build_naming_the_line(folder, tmp_path, bad):
    """A missing file was found epochs later by a worker, naming only the item, not the list file and its line."""
    root, samples = folder
    line, says = {
        'no label': (samples[1][0], 'has no label;'),
        'missing file': (f'{root}/cta/011.png 1', 'no file'),
    }[bad]
    (tmp_path / 'list.txt').write_text(f'{samples[0][0]} 0\n# a comment\n{line}\n')
    with pytest.raises(DataError) as e:
        DATASETS.build({'NAME': 'ImageListDataset', 'LIST_FILE': str(tmp_path / 'list.txt')})
    assert str(e.value).startswith(
        f"LIST_FILE: line 3 of {tmp_path / 'list.txt'} ('{line}'){'' if bad == 'no label' else ':'} {says}"
    )


def test_a_truncated_image_names_the_file_and_the_item(tmp_path):
    samples = write_png_folder(str(tmp_path), classes=2, per_class=2)
    path = samples[3][0]
    data = open(path, 'rb').read()
    open(path, 'wb').write(data[: len(data) // 2])
    ds = DATASETS.build(Config({'D': {'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp_path)}}).D)
    ds[2]  # the others still read
    with pytest.raises(DataError, match=rf'^D: item 3: cannot read image {path} \(.*\); replace or remove the file$'):
        ds[3]


def test_cifar10_reads_the_pickle_layout(tmp_path):
    root = write_cifar10(str(tmp_path), per_batch=6, test=4)
    train = DATASETS.build({'NAME': 'ImageClassifyPublicDataset', 'DATA_ROOT': root, 'MODE': 'train'})
    test = DATASETS.build({'NAME': 'ImageClassifyPublicDataset', 'DATA_ROOT': root, 'MODE': 'test'})
    assert len(train) == 30 and len(test) == 4
    with open(os.path.join(root, 'cifar-10-batches-py', 'data_batch_2'), 'rb') as f:
        batch = pickle.load(f)
    item = train[7]  # the second file's second image
    assert set(item) == {'meta', 'img', 'label'} and item['label'] == batch['labels'][1]
    expected = batch['data'][1].reshape(3, 32, 32).transpose(1, 2, 0)
    assert isinstance(item['img'], Image.Image) and np.array_equal(np.asarray(item['img']), expected)
    also = DATASETS.build(
        {'NAME': 'ImageClassifyPublicDataset', 'DATA_ROOT': os.path.join(root, 'cifar-10-batches-py')}
    )
    assert len(also) == 30  # the batches folder itself works too


def test_missing_cifar_data_says_where_to_put_it(tmp_path):
    cfg = Config({'D': {'NAME': 'ImageClassifyPublicDataset', 'DATA_ROOT': str(tmp_path / 'c10')}}).D
    with pytest.raises(DataError) as e:
        DATASETS.build(cfg)
    message = str(e.value)
    assert message.startswith(f'D.DATA_ROOT: no CIFAR-10 data in {tmp_path / "c10"}; put the python version there:')
    assert f'{tmp_path / "c10" / "cifar-10-batches-py"}/' in message and 'nothing is downloaded' in message
    assert '\n' not in message and not (tmp_path / 'c10').exists()
    with pytest.raises(ConfigError, match='D.DATA_ROOT: give the folder that holds cifar-10-batches-py'):
        DATASETS.build(Config({'D': {'NAME': 'ImageClassifyPublicDataset'}}).D)


class Marker:
    """Unpickling this creates a file: the code a malicious pickle would run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def test_a_cifar_file_holding_code_is_refused_unrun(tmp_path):
    root = write_cifar10(str(tmp_path), per_batch=2, test=2)
    marker = tmp_path / 'ran'
    with open(os.path.join(root, 'cifar-10-batches-py', 'data_batch_3'), 'wb') as f:
        pickle.dump({'data': Marker(str(marker)), 'labels': [0]}, f)
    with pytest.raises(
        DataError, match=r'data_batch_3 is not a CIFAR python file \(UnpicklingError: io\.open is not allowed'
    ):
        DATASETS.build({'NAME': 'ImageClassifyPublicDataset', 'DATA_ROOT': root})
    assert not marker.exists()


def test_transforms_run_in_the_loader_with_defaults_recorded(folder):
    root, _ = folder
    cfg = data_cfg(NAME='ImageFolderDataset', DATA_ROOT=root, BATCH_SIZE=4, TRANSFORMS=TRAIN_TRANSFORMS)
    data = bundle(cfg)
    batch = next(data.iterate())
    assert set(batch) == {'img', 'label'} and batch['img'].shape == (4, 3, 12, 12) and batch['label'].shape == (4,)
    assert cfg.TRANSFORMS[0].RATIO == [0.75, 4 / 3] and cfg.TRANSFORMS[1].P == 0.5  # the run's config shows them


def test_augmentation_is_a_function_of_seed_pass_and_index(folder):
    root, _ = folder
    cfg = dict(NAME='ImageFolderDataset', DATA_ROOT=root, BATCH_SIZE=12, SHUFFLE=False, TRANSFORMS=TRAIN_TRANSFORMS)
    first = bundle(data_cfg(**cfg))
    again = bundle(data_cfg(**cfg))
    assert torch.equal(next(first.iterate())['img'], next(again.iterate())['img'])
    one = first.dataset[3]['img']
    first.set_epoch(1)
    assert not torch.equal(first.dataset[3]['img'], one)  # another pass, other draws
    first.set_epoch(0)
    assert torch.equal(first.dataset[3]['img'], one)
    other_seed = bundle(data_cfg(**cfg), seed=8)
    assert not torch.equal(other_seed.dataset[3]['img'], one)
    assert sample_random(7, 1, 3).random() == random.Random((7 << 64) | (1 << 32) | 3).random()


@pytest.mark.slow
def test_worker_processes_give_the_batches_of_the_main_process(folder):
    root, _ = folder
    cfg = dict(NAME='ImageFolderDataset', DATA_ROOT=root, BATCH_SIZE=3, TRANSFORMS=TRAIN_TRANSFORMS)
    batches = {}
    for workers in (0, 2):
        data = bundle(data_cfg(**cfg, NUM_WORKERS=workers))
        data.set_epoch(2)
        batches[workers] = list(data.iterate(start_batch=1))
    assert len(batches[0]) == 3
    for a, b in zip(batches[0], batches[2]):
        assert torch.equal(a['img'], b['img']) and torch.equal(a['label'], b['label'])


def test_a_missing_input_key_in_the_loader_names_the_item(folder):
    root, _ = folder
    transforms = [{'NAME': 'ImageToTensor', 'INPUT_KEY': 'image'}]
    data = bundle(
        data_cfg(NAME='ImageFolderDataset', DATA_ROOT=root, BATCH_SIZE=2, SHUFFLE=False, TRANSFORMS=transforms)
    )
    with pytest.raises(DataError) as e:
        next(data.iterate())
    assert str(e.value) == (
        "SOLVER.TRAIN_DATA.TRANSFORMS[0] (ImageToTensor): the sample has no 'image' (its INPUT_KEY); its keys: img,"
        " label, meta; set INPUT_KEY to one of them, or put the transform that makes 'image' before this one (item 0)"
    )


def test_images_left_as_pil_images_are_one_error_at_batching(folder):
    root, _ = folder
    data = bundle(data_cfg(NAME='ImageFolderDataset', DATA_ROOT=root, BATCH_SIZE=2))
    with pytest.raises(
        DataError, match=r"sample key 'img' holds a PIL image \(RGB, 16x16\) \(an image: end TRANSFORMS"
    ):
        next(data.iterate())


def split_lacking_a_class(folder, tmp_path):
    """(train root, a val folder without class_0, the data config, a solver config training on the root)."""
    import shutil

    root, _ = folder
    val = tmp_path / 'val'
    for name in ('class_1', 'class_2'):
        shutil.copytree(os.path.join(root, name), val / name)
    data = {'NAME': 'ImageFolderDataset', 'BATCH_SIZE': 4, 'TRANSFORMS': [{'NAME': 'ImageToTensor'}]}
    model = {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 768, 'HIDDEN_DIMS': [8], 'OUT_DIM': 3}}
    solver_cfg = {
        'NAME': 'TrainValSolver', 'WORK_DIR': str(tmp_path / 'w'), 'MAX_EPOCHS': 1, 'MODEL': model,
        'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.1}, 'METRICS': [{'NAME': 'AccuracyMetric'}],
        'TRAIN_DATA': dict(data, DATA_ROOT=root),
    }  # fmt: skip
    return root, val, data, solver_cfg


def test_a_split_lacking_a_class_keeps_the_class_numbers_only_with_classes(folder, tmp_path):
    """A val folder without class_0 would number class_1 as 0: refused, unless every split gives CLASSES."""

    from helpers import build_solver

    root, val, data, solver_cfg = split_lacking_a_class(folder, tmp_path)
    solver_cfg['EVAL_DATA'] = dict(data, DATA_ROOT=str(val))
    with pytest.raises(ConfigError, match=r"^SOLVER\.EVAL_DATA: its classes \['class_1', 'class_2'\] are numbered"):
        build_solver({'SOLVER': solver_cfg})
    classes = ['class_0', 'class_1', 'class_2']
    solver_cfg['TRAIN_DATA']['CLASSES'] = solver_cfg['EVAL_DATA']['CLASSES'] = classes
    solver = build_solver({'SOLVER': solver_cfg})
    assert sorted({int(item['label']) for item in solver.datas['eval'].dataset}) == [1, 2]  # train's numbers
    with pytest.raises(DataError, match=r"class folder\(s\) \['class_2'\] that CLASSES \['class_0', 'class_1'\] lacks"):
        DATASETS.build({'NAME': 'ImageFolderDataset', 'DATA_ROOT': root, 'CLASSES': ['class_0', 'class_1']})
    # a split holding a class the train data lacks: CLASSES cannot help, and the error does not suggest it
    del solver_cfg['TRAIN_DATA']['CLASSES'], solver_cfg['EVAL_DATA']['CLASSES']
    solver_cfg['TRAIN_DATA']['DATA_ROOT'], solver_cfg['EVAL_DATA']['DATA_ROOT'] = str(val), root
    with pytest.raises(ConfigError, match=r"another order\); it has \['class_0'\], which the model does not know"):
        build_solver({'SOLVER': solver_cfg})


def test_a_select_that_drops_the_labels_is_named_in_the_error(folder, tmp_path):
    from helpers import build_solver

    _, _, _, solver_cfg = split_lacking_a_class(folder, tmp_path)
    solver_cfg['TRAIN_DATA']['TRANSFORMS'].append({'NAME': 'Select', 'KEYS': ['img']})
    solver = build_solver({'SOLVER': solver_cfg})
    with pytest.raises(DataError, match=r"an image dataset from its folders or list file \(a TRANSFORMS Select must"
                       r" keep 'label'\)"):  # fmt: skip
        solver.solve()
    solver.close()


def test_list_file_labels_beside_named_train_classes_are_said_to_follow_their_order(folder, tmp_path, caplog):
    """A list file gives class numbers, which nothing can check against the train folders' names: said once."""
    from helpers import build_solver

    root, samples = folder
    (tmp_path / 'list.txt').write_text(''.join(f'{os.path.relpath(p, root)} {label}\n' for p, label in samples))
    _, _, data, solver_cfg = split_lacking_a_class(folder, tmp_path)
    solver_cfg['EVAL_DATA'] = dict(data, NAME='ImageListDataset', LIST_FILE=str(tmp_path / 'list.txt'), DATA_ROOT=root)
    with caplog.at_level('WARNING'):
        build_solver({'SOLVER': solver_cfg}).close()
    said = [r.getMessage() for r in caplog.records if 'class numbers' in r.getMessage()]
    assert said == [
        'SOLVER.EVAL_DATA: its labels are class numbers, which cannot be checked against the class names the model'
        ' learns; they must follow that order (0: class_0, 1: class_1, 2: class_2)'
    ]


def test_images_of_another_size_in_a_batch_name_the_file_and_the_fix(tmp_path):
    write_png_folder(str(tmp_path), classes=2, per_class=3)
    odd = tmp_path / 'class_1' / 'odd.png'
    Image.fromarray(np.zeros((20, 24, 3), np.uint8)).save(odd)
    cfg = data_cfg(
        NAME='ImageFolderDataset', DATA_ROOT=str(tmp_path), BATCH_SIZE=8, TRANSFORMS=[{'NAME': 'ImageToTensor'}]
    )
    with pytest.raises(
        DataError, match=r"differ in the shape of 'img': \[3, 16, 16\] and \[3, 20, 24\] \(.*odd\.png\);"
    ):
        next(iter(bundle(cfg, mode='eval').iterate()))


def test_an_image_batch_of_another_size_than_the_model_takes_points_at_resize_too():
    from scepter_like.model.registry import MODELS
    from scepter_like.solver.model_call import forward_checked

    model = MODELS.build({'NAME': 'Classifier', 'BACKBONE': {'NAME': 'MLP', 'IN_DIM': 768, 'OUT_DIM': 3}}).eval()
    with pytest.raises(DataError, match=r'IN_DIM \(now 768\) to fit the data; images of another size than the rest'):
        forward_checked(model, {'img': torch.zeros(1, 3, 20, 24)})


def test_an_image_folder_follows_symlinked_sub_folders_once(tmp_path):
    """torchvision's ImageFolder follows them; they were skipped without a word (a class lost its images)."""
    from image_support import write_png_folder

    from scepter_like.data.image_files import list_image_folder

    root, elsewhere = tmp_path / 'root', tmp_path / 'more'
    write_png_folder(root, classes=2, per_class=2)
    write_png_folder(elsewhere, classes=1, per_class=3)
    os.symlink(elsewhere / 'class_0', root / 'class_0' / 'extra')
    os.symlink(root / 'class_0', root / 'class_0' / 'loop')  # a link back up: walked once
    classes, samples = list_image_folder(str(root), 'DATA_ROOT')
    assert [label for _, label in samples].count(0) == 2 + 3 and len(samples) == 2 + 3 + 2
    assert sum('/extra/' in path for path, _ in samples) == 3


def test_weights_name_their_classes_and_data_numbered_otherwise_is_refused(folder, tmp_path):
    """Without train data (run_eval, run_inference) a split lacking a class, or CLASSES in another order, would be
    measured against the wrong labels: the checkpoint names the train classes, and such data is refused."""
    import logging

    from helpers import build_solver

    from scepter_like.model.description import parse_description
    from scepter_like.solver.inference_solver import build_solver_with_weights
    from scepter_like.utils.checkpoint import MODEL_DESCRIPTION_KEY

    root, val, data, solver_cfg = split_lacking_a_class(folder, tmp_path)
    trainer = build_solver({'SOLVER': solver_cfg})
    classes = ['class_0', 'class_1', 'class_2']
    ckpt = str(tmp_path / 'ckpt.pth')
    trainer.save_checkpoint(ckpt)
    assert torch.load(ckpt, weights_only=True)[MODEL_DESCRIPTION_KEY]['classes'] == classes
    metadata = trainer.save_safetensors()[1]
    assert parse_description(metadata[MODEL_DESCRIPTION_KEY], 'metadata')['classes'] == classes

    def evaluate(path, **eval_data):
        cfg = Config({'SOLVER': dict(solver_cfg, EVAL_DATA=dict(data, **eval_data))})
        return build_solver_with_weights(cfg, path, logging.getLogger('scepter_like.test'))

    prefix = r'^SOLVER\.EVAL_DATA: its classes \[{}\] are numbered otherwise than those .*ckpt.pth was trained on'
    with pytest.raises(ConfigError, match=prefix.format(r"'class_1', 'class_2'")):
        evaluate(ckpt, DATA_ROOT=str(val))
    with pytest.raises(ConfigError, match=prefix.format(r"'class_2', 'class_1', 'class_0'")):
        evaluate(ckpt, DATA_ROOT=root, CLASSES=classes[::-1])
    solver = evaluate(ckpt, DATA_ROOT=str(val), CLASSES=classes)
    assert solver.unwrapped_model.class_names == classes  # what an export from it records again
    resume = dict(solver_cfg, WORK_DIR=str(tmp_path / 'r'), RESUME_FROM=ckpt)
    resume['TRAIN_DATA'] = dict(data, DATA_ROOT=root, CLASSES=classes[::-1])
    with pytest.raises(ConfigError, match=r'^SOLVER\.TRAIN_DATA: its classes .* numbered otherwise than those'):
        build_solver({'SOLVER': resume})
    old = torch.load(ckpt, weights_only=True)  # a file written before weights named their classes: as before
    del old[MODEL_DESCRIPTION_KEY]['classes']
    torch.save(old, ckpt)
    assert evaluate(ckpt, DATA_ROOT=str(val)).unwrapped_model.class_names is None


def test_hidden_folders_and_files_are_no_data(tmp_path):
    """A notebook's .ipynb_checkpoints is no class, and macOS's ._x.png (AppleDouble, no image) no sample."""
    samples = write_png_folder(str(tmp_path), classes=2, per_class=2)
    (tmp_path / '.ipynb_checkpoints').mkdir()
    (tmp_path / 'class_1' / '._000.png').write_bytes(b'\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X')
    (tmp_path / 'class_1' / '.cache').mkdir()
    Image.open(samples[0][0]).save(tmp_path / 'class_1' / '.cache' / 'x.png')
    ds = DATASETS.build({'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp_path)})
    assert ds.classes == ['class_0', 'class_1'] and [s[0] for s in ds.samples] == [p for p, _ in samples]


def test_16_and_32_bit_grey_images_are_scaled_to_8_bits_not_clipped(tmp_path):
    """Pillow's convert('RGB') clips I;16 values at 255: a 12-bit scan in a 16-bit PNG came out almost white."""
    from scepter_like.transform.io import read_image

    Image.fromarray(np.array([[0, 4095, 32896, 65535]], dtype=np.uint16)).save(tmp_path / 'g16.png')
    assert np.asarray(read_image(str(tmp_path / 'g16.png')))[0, :, 0].tolist() == [0, 16, 128, 255]
    Image.fromarray(np.array([[-5, 2**30, 2**31 - 1]], dtype=np.int32)).save(tmp_path / 'g32.tif')
    assert np.asarray(read_image(str(tmp_path / 'g32.tif')))[0, :, 1].tolist() == [0, 128, 255]


@pytest.mark.parametrize('backend', ['pillow', 'cv2'])
def test_a_truncated_jpeg_is_an_error_with_every_backend(tmp_path, backend):
    """libjpeg pads a JPEG that ends early with grey and only prints a warning, so cv2 returned the padded image."""
    if backend == 'cv2':
        pytest.importorskip('cv2')
    from scepter_like.transform.io import read_image

    path = str(tmp_path / 'full.jpg')
    noise = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)  # most bytes are pixel data
    Image.fromarray(noise).save(path, quality=95)
    data = open(path, 'rb').read()
    assert read_image(path, backend) is not None
    trunc, tail = tmp_path / 'trunc.jpg', tmp_path / 'tail.jpg'
    trunc.write_bytes(data[: len(data) * 2 // 3])
    tail.write_bytes(data + b'\0' * 16 + b'video after the image')  # a motion photo: the image itself is whole
    with pytest.raises(
        DataError, match=rf'^cannot read image {trunc} \((?i:.*truncated.*)\); replace or remove the file$'
    ):
        read_image(str(trunc), backend)
    assert np.array_equal(np.asarray(read_image(str(tail), backend)), np.asarray(read_image(path, backend)))


def _turned(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif


@pytest.mark.parametrize('backend', ['pillow', 'cv2', 'dataset'])
def test_every_backend_gives_the_image_as_viewers_show_it(tmp_path, backend):
    """A phone stores a portrait shot turned, with EXIF orientation 6 (turn 90 degrees clockwise to show):
    cv2 applied it, pillow (and the image datasets) did not, so the same file trained two ways."""
    if backend == 'cv2':
        pytest.importorskip('cv2')
    from scepter_like.transform.io import read_image

    a = np.zeros((20, 40, 3), np.uint8)
    a[:, :20] = 255  # shown: 20 high, 40 wide, left half white
    (tmp_path / 'c').mkdir()
    path = str(tmp_path / 'c' / 'turned.jpg')
    Image.fromarray(a).transpose(Image.Transpose.ROTATE_90).save(path, quality=95, exif=_turned(6))
    if backend == 'dataset':
        img = DATASETS.build({'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp_path)})[0]['img']
    else:
        img = read_image(path, backend)
    shown = np.asarray(img)
    assert shown.shape == (20, 40, 3)
    assert shown[:, :18].min() > 200 and shown[:, 22:].max() < 50


def test_a_float_image_is_an_error_not_clipped_to_8_bits(tmp_path):
    """A 0..1 float TIFF (a microscope's) came out almost black: Pillow clips mode F values to 0..255."""
    from scepter_like.transform.io import read_image

    path = tmp_path / 'f.tif'
    Image.fromarray(np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4), 'F').save(path)
    with pytest.raises(DataError, match=rf'^cannot read image {path}: .*32-bit floats \(Pillow mode F\).*16-bit'):
        read_image(str(path))


TOO_MANY = (
    r'gives 10 class logits and SOLVER\.TRAIN_DATA has 3 classes .*;'
    r' set SOLVER\.MODEL\.BACKBONE\.OUT_DIM: 3, or name all 10 classes in SOLVER\.TRAIN_DATA\.CLASSES'
)
TOO_FEW = (
    r"gives 3 class logits and SOLVER\.TRAIN_DATA has 4 classes \['class_0', 'class_1', 'class_2', 'class_3'\];"
    r' set SOLVER\.MODEL\.BACKBONE\.OUT_DIM: 4$'
)


@pytest.mark.parametrize(
    'logits, classes, message', [(10, None, TOO_MANY), (3, ['class_0', 'class_1', 'class_2', 'class_3'], TOO_FEW)]
)
def test_a_classifier_with_other_than_one_logit_per_class_is_one_error(folder, tmp_path, logits, classes, message):
    """A 10-logit head on a 3-class folder trained without a word (its checkpoint named 3 classes for 10 outputs),
    and so did CLASSES naming a class the head has no logit for (a class without images)."""
    from helpers import build_solver

    _, _, data, solver_cfg = split_lacking_a_class(folder, tmp_path)
    solver_cfg['MODEL']['BACKBONE']['OUT_DIM'] = logits
    if classes:
        solver_cfg['TRAIN_DATA']['CLASSES'] = classes
    with pytest.raises(ConfigError, match=r'^SOLVER\.MODEL\.BACKBONE\.OUT_DIM: the model ' + message):
        build_solver({'SOLVER': solver_cfg})
    solver_cfg['MODEL']['BACKBONE']['OUT_DIM'] = len(classes or range(3))
    build_solver({'SOLVER': solver_cfg})  # one logit per class: no word
