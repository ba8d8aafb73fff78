"""scepter's classification example on a CIFAR-10 folder, and bad image input through tools/run_train.py.

Both run the tool in this process (``scepter_like.cli.run``), as a user starts it: the example
with only DATA_ROOT, MAX_EPOCHS, BATCH_SIZE, NUM_WORKERS and WORK_DIR overridden; each bad
input ends in one ``error:`` line, exit status 2, before any training step or checkpoint.
"""

import json
import os

import pytest
import torch
import yaml
from conftest import REPO, run_train_killed_at
from helpers import load_run_train
from image_support import write_cifar10, write_png_folder

from scepter_like.cli import run

EXAMPLE = os.path.join(REPO, 'tests', 'data', 'scepter_classification_example.yaml')


@pytest.mark.slow
def test_scepters_classification_example_trains_and_evaluates_on_a_cifar10_folder(tmp_path, capsys):
    root = write_cifar10(str(tmp_path / 'cifar'), per_batch=8, test=12)
    work = tmp_path / 'work'
    overrides = [f'SOLVER.{mode}_DATA.{key}={value}' for mode in ('TRAIN', 'EVAL') for key, value in
                 (('DATA_ROOT', root), ('BATCH_SIZE', 20 if mode == 'TRAIN' else 6), ('NUM_WORKERS', 2))]  # fmt: skip
    status = run(load_run_train(), ['--cfg', EXAMPLE, *overrides, 'SOLVER.MAX_EPOCHS=1', f'SOLVER.WORK_DIR={work}'])
    err = capsys.readouterr().err
    assert status == 0, err[-3000:]
    records = [json.loads(line) for line in (work / 'metrics.jsonl').read_text().splitlines()]
    train = [r for r in records if r['kind'] == 'train' and 'loss' in r['values']]
    evals = [r for r in records if r['kind'] == 'eval']
    assert train[-1]['step'] == 2 and torch.isfinite(torch.tensor(train[-1]['values']['loss'])), records  # 40 / 20
    assert len(evals) == 1 and 0.0 <= evals[0]['values']['accuracy'] <= 1.0, records
    saved = torch.load(work / 'eval_00001.pth', weights_only=True)  # SAVE_EVAL_DATA: the pass's logits and labels
    assert saved['logits'].shape == (12, 10) and torch.allclose(saved['logits'].sum(1), torch.ones(12))  # softmax
    config = yaml.safe_load((work / 'config.yaml').read_text())
    assert config['SOLVER']['TRAIN_DATA']['TRANSFORMS'][0]['NAME'] == 'RandomResizedCrop'


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    """A folder of 3 x 4 PNGs (16 x 16) and a small image job on it, as a YAML file."""
    tmp = tmp_path_factory.mktemp('image_job')
    samples = write_png_folder(str(tmp / 'pngs'), classes=3, per_class=4)
    transforms = [{'NAME': 'ImageToTensor'}, {'NAME': 'Select', 'KEYS': ['img', 'label']}]
    data = {'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp / 'pngs'), 'BATCH_SIZE': 4, 'TRANSFORMS': transforms}
    job = {
        'ENV': {'SEED': 0, 'NUM_THREADS': 1},
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'MAX_EPOCHS': 1,
            'MODEL': {
                'NAME': 'Classifier',
                'BACKBONE': {'NAME': 'ConvNet', 'IN_CHANNELS': 3, 'CHANNELS': [4], 'OUT_DIM': 3},
            },
            'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.1},
            'TRAIN_DATA': dict(data, SHUFFLE=False),
            'METRICS': [{'NAME': 'AccuracyMetric'}],
            'TRAIN_HOOKS': [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}],
        },
    }
    (tmp / 'job.yaml').write_text(yaml.safe_dump(job))
    return tmp, samples


def run_job(tmp, capsys, *overrides):
    """Run the image job (work dir ``tmp/work``); returns (exit status, stdout, stderr)."""
    status = run(load_run_train(), ['--cfg', str(tmp / 'job.yaml'), f'SOLVER.WORK_DIR={tmp / "work"}', *overrides])
    out = capsys.readouterr()
    return status, out.out, out.err


def expect_one_error_line(tmp, capsys, overrides, pattern):
    status, out, err = run_job(tmp, capsys, *overrides)
    assert status == 2, err[-3000:]
    assert err.count('\n') == 1 and err.startswith('error: ') and 'Traceback' not in err, err
    assert pattern in err, err
    assert ' step 1 ' not in out + err and not (tmp / 'work' / 'checkpoints' / 'latest').exists()
    return err


def test_the_image_job_runs(images, capsys):
    tmp, _ = images
    status, _, err = run_job(tmp, capsys, f'SOLVER.WORK_DIR={tmp / "ok"}')
    assert status == 0, err[-3000:]
    assert (tmp / 'ok' / 'checkpoints' / 'latest').exists()


def test_print_config_shows_each_transforms_defaults(images, capsys):
    tmp, _ = images
    status, out, err = run_job(tmp, capsys, '--print-config')
    assert status == 0, err
    transforms = yaml.safe_load(out)['SOLVER']['TRAIN_DATA']['TRANSFORMS']
    assert transforms[0] == {'NAME': 'ImageToTensor', 'INPUT_KEY': 'img', 'OUTPUT_KEY': 'img', 'BACKEND': 'pillow'}
    assert transforms[1] == {'NAME': 'Select', 'KEYS': ['img', 'label'], 'META_KEYS': []}


def test_an_unknown_transform_is_one_line_with_a_suggestion(images, capsys):
    tmp, _ = images
    expect_one_error_line(
        tmp,
        capsys,
        ['--print-config', 'SOLVER.TRAIN_DATA.TRANSFORMS.0.NAME=ImageToTensr'],
        "error: SOLVER.TRAIN_DATA.TRANSFORMS[0].NAME: 'ImageToTensr' is not in registry TRANSFORMS;"
        ' did you mean ImageToTensor or ToTensor?',
    )
    expect_one_error_line(tmp, capsys, ['SOLVER.TRAIN_DATA.TRANSFORMS.0.NAME=ImageToTensr'], 'did you mean ImageToT')


def test_a_transform_whose_input_key_the_sample_lacks_names_its_keys(images, capsys):
    tmp, _ = images
    expect_one_error_line(
        tmp,
        capsys,
        ['SOLVER.TRAIN_DATA.TRANSFORMS.0.INPUT_KEY=image'],
        "error: SOLVER.TRAIN_DATA.TRANSFORMS[0] (ImageToTensor): the sample has no 'image' (its INPUT_KEY);"
        ' its keys: img, label, meta; set INPUT_KEY to one of them',
    )


def test_a_truncated_image_names_the_file_and_the_item(images, capsys, tmp_path):
    tmp, samples = images
    root = tmp_path / 'pngs'
    broken = write_png_folder(str(root), classes=3, per_class=4)[1][0]
    data = open(broken, 'rb').read()
    open(broken, 'wb').write(data[:100])
    expect_one_error_line(
        tmp,
        capsys,
        [f'SOLVER.TRAIN_DATA.DATA_ROOT={root}'],
        f'error: SOLVER.TRAIN_DATA: item 1: cannot read image {broken} (',
    )


def test_a_list_file_line_without_a_label_is_one_line(images, capsys, tmp_path):
    tmp, samples = images
    (tmp_path / 'list.txt').write_text(f'{samples[0][0]} 0\n\n{samples[1][0]}\n')
    expect_one_error_line(
        tmp,
        capsys,
        [f'SOLVER.TRAIN_DATA={{NAME: ImageListDataset, LIST_FILE: {tmp_path / "list.txt"}, BATCH_SIZE: 4}}'],
        f"error: SOLVER.TRAIN_DATA.LIST_FILE: line 3 of {tmp_path / 'list.txt'} ('{samples[1][0]}') has no label;",
    )


@pytest.mark.slow
def test_an_augmented_run_killed_mid_epoch_resumes_bit_exactly_with_workers(tmp_path):
    """Random crops, flips and dropout, 2 loader workers: killed after step 4 of 9, resumed, it ends where a run left
    alone ends, weights and all."""
    write_png_folder(str(tmp_path / 'pngs'), classes=3, per_class=4)
    transforms = [
        {'NAME': 'RandomResizedCrop', 'SIZE': 8, 'SCALE': [0.3, 1.0]},
        {'NAME': 'RandomHorizontalFlip'},
        {'NAME': 'ImageToTensor'},
        {'NAME': 'Select', 'KEYS': ['img', 'label']},
    ]
    data = {'NAME': 'ImageFolderDataset', 'DATA_ROOT': str(tmp_path / 'pngs'), 'BATCH_SIZE': 4, 'NUM_WORKERS': 2}
    backbone = {'NAME': 'MLP', 'IN_DIM': 192, 'HIDDEN_DIMS': [16], 'OUT_DIM': 3, 'DROPOUT': 0.3}
    job = {
        'ENV': {'SEED': 5, 'NUM_THREADS': 1, 'DETERMINISTIC': True},
        'SOLVER': {
            'NAME': 'TrainValSolver',
            'MAX_EPOCHS': 3,
            'MODEL': {'NAME': 'Classifier', 'BACKBONE': backbone},
            'OPTIMIZER': {'NAME': 'SGD', 'LEARNING_RATE': 0.1, 'MOMENTUM': 0.9},
            'TRAIN_DATA': dict(data, TRANSFORMS=transforms),
            'TRAIN_HOOKS': [
                {'NAME': 'BackwardHook'},
                {'NAME': 'CheckpointHook', 'STEP_INTERVAL': 2, 'SAVE_LAST': True},
                {'NAME': 'KillHook'},
            ],
        },
    }
    (tmp_path / 'job.yaml').write_text(yaml.safe_dump(job))
    support = os.path.join(REPO, 'tests', 'ckpt_support.py')

    def train(work, kill_at='', resume=False):
        args = ['--cfg', tmp_path / 'job.yaml', '--import', support, f'SOLVER.WORK_DIR={work}']
        res = run_train_killed_at(kill_at, *args, *(['SOLVER.RESUME_FROM=auto'] if resume else []))
        return res.returncode, res.stderr

    status, err = train(tmp_path / 'alone')
    assert status == 0, err[-3000:]
    assert train(tmp_path / 'chain', kill_at='train:4')[0] == -9  # SIGKILLed as step 5 begins (checkpoint at 4)
    status, err = train(tmp_path / 'chain', resume=True)
    assert status == 0, err[-3000:]

    def last(work):
        ckpt = torch.load(work / 'checkpoints' / 'checkpoint-last.pth', weights_only=True)
        return ckpt['model'], ckpt['solver']['total_iter']

    (alone, steps), (chain, chain_steps) = last(tmp_path / 'alone'), last(tmp_path / 'chain')
    assert steps == chain_steps == 9
    assert alone.keys() == chain.keys() and all(torch.equal(alone[k], chain[k]) for k in alone)
