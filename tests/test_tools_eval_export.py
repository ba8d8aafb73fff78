"""run_eval, run_inference and export as users run them, on one short digits training run.

The training run is shared by every test here (module-scoped fixture): one epoch, with
SAVE_LAST so the last checkpoint holds the eval and test metrics training logged.
"""

import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import DIGITS_CFG, TOOLS, run_cli, tool_env

from scepter_like.config import Config
from scepter_like.solver.inference_solver import build_solver_with_weights

TRAIN_ARGS = ['SOLVER.MAX_EPOCHS=1', 'SOLVER.LR_SCHEDULER.T_MAX=1', 'SOLVER.TRAIN_HOOKS.3.SAVE_LAST=true']


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """(work dir, last checkpoint path) of a one-epoch digits run."""
    root = tmp_path_factory.mktemp('digits')
    work = root / 'run'
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', *TRAIN_ARGS)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = work / 'checkpoints' / 'digits-last.pth'
    assert ckpt.is_file()
    return work, ckpt


def _one_error_line(res, pattern):
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), res.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert 'Traceback' not in res.stderr + res.stdout


def _digits_solver(ckpt, *overrides):
    """An in-process solver of the digits config holding the weights of ``ckpt``."""
    from scepter_like.config import apply_overrides
    from scepter_like.utils.imports import import_user_modules

    cfg = Config(cfg_file=DIGITS_CFG)
    apply_overrides(cfg, list(overrides))
    import_user_modules(cfg.IMPORTS)
    return build_solver_with_weights(cfg, str(ckpt), logging.getLogger('scepter_like.test'), data_modes=('test',))


def test_run_eval_reproduces_training_metrics_exactly(trained):
    work, ckpt = trained
    logged = torch.load(ckpt, weights_only=True)['solver']['epoch_outputs']
    assert set(logged) == {'eval', 'test'} and 'accuracy_top3' in logged['test']
    # a WORK_DIR stands for the checkpoint its latest pointer names (the last one here)
    res = run_cli('run_eval.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', work)
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads((work / 'metrics.json').read_text())
    assert record['checkpoint'] == str(ckpt)
    assert record['eval'] == logged['eval'] and record['test'] == logged['test']  # exact floats
    # outside training there is no epoch: the log says what was evaluated
    assert re.search(r'eval on DigitsDataset \(\d+ samples\): accuracy', res.stdout), res.stdout[-2000:]
    assert 'test on DigitsDataset (360 samples)' in res.stdout and ' epoch ' not in res.stdout
    table = res.stdout[res.stdout.index('metric ') :]
    assert re.search(rf'accuracy\s+{logged["eval"]["accuracy"]:.6f}\s+{logged["test"]["accuracy"]:.6f}', table)


def test_run_eval_of_a_mixed_precision_run_evaluates_under_its_autocast(tmp_path):
    """A bf16 run's evaluations ran under autocast; run_eval ran in float32 and gave other numbers."""
    work = tmp_path / 'amp'
    amp = ['SOLVER.TRAIN_HOOKS.0.USE_AMP=true', 'SOLVER.TRAIN_HOOKS.0.AMP_DTYPE=bf16']
    res = run_cli('run_train.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', *TRAIN_ARGS, *amp)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = work / 'checkpoints' / 'digits-last.pth'
    logged = torch.load(ckpt, weights_only=True)['solver']['epoch_outputs']
    res = run_cli('run_eval.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', ckpt, *amp)
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads((work / 'metrics.json').read_text())
    assert record['eval'] == logged['eval'] and record['test'] == logged['test']  # exact floats
    solver = _digits_solver(ckpt, *amp)
    try:
        assert solver.updater.settings.autocast_dtype is torch.bfloat16
    finally:
        solver.close()


def test_run_inference_equals_predict_and_manual_forward(trained, tmp_path):
    work, ckpt = trained
    solver = _digits_solver(ckpt, f'SOLVER.WORK_DIR={tmp_path / "w"}')
    images = solver.datas['test'].dataset.arrays['img'][:50].numpy()
    np.savez(tmp_path / 'x.npz', img=images)

    res = run_cli(
        'run_inference.py',
        '--cfg',
        DIGITS_CFG,
        f'SOLVER.WORK_DIR={work}',
        '--checkpoint',
        ckpt,
        '--input',
        tmp_path / 'x.npz',
        '--output',
        tmp_path / 'y.npz',
        '--batch-size',
        16,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(tmp_path / 'y.npz') as y:
        assert y.files == ['logits']
        tool_logits = y['logits']

    predicted = solver.predict({'img': images}, batch_size=16)
    assert list(predicted) == ['logits']
    np.testing.assert_array_equal(tool_logits, predicted['logits'])
    model = solver.unwrapped_model.eval()
    with torch.no_grad():
        manual = model(img=torch.from_numpy(images))['logits'].numpy()
    np.testing.assert_allclose(predicted['logits'], manual, rtol=1e-5, atol=1e-6)
    # the tool's logits give the accuracy training logged on these samples
    labels = solver.datas['test'].dataset.arrays['label'][:50].numpy()
    assert (tool_logits.argmax(1) == labels).mean() > 0.5


def test_run_inference_without_input_predicts_the_config_test_data(trained, tmp_path):
    """Without --input the tool runs the model over TEST_DATA, in the dataset's order."""
    work, ckpt = trained
    res = run_cli(
        'run_inference.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', ckpt,
        '--output', tmp_path / 'y.npz',
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    solver = _digits_solver(ckpt, f'SOLVER.WORK_DIR={tmp_path / "w"}')
    images = solver.datas['test'].dataset.arrays['img'].numpy()
    with np.load(tmp_path / 'y.npz') as y:
        assert 'logits' in y.files
        assert y['logits'].shape == (len(images), 10)
        np.testing.assert_array_equal(y['logits'], solver.predict({'img': images}, batch_size=64)['logits'])


def test_run_inference_input_missing_a_key_is_one_error_line(trained, tmp_path):
    work, ckpt = trained
    np.savez(tmp_path / 'bad.npz', image=np.zeros((4, 8, 8), np.float32))
    out = tmp_path / 'y.npz'
    res = run_cli(
        'run_inference.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', ckpt,
        '--input', tmp_path / 'bad.npz', '--output', out,
    )  # fmt: skip
    _one_error_line(res, r"the model needs input 'img', which the inputs lack; they have \['image'\]")
    assert not out.exists()


def test_export_safetensors_loads_back_equal_with_its_config(trained, tmp_path):
    from safetensors.torch import load_file

    from scepter_like.model.registry import MODELS
    from scepter_like.utils.checkpoint import load_state_dict_checked

    work, ckpt = trained
    out = tmp_path / 'export' / 'digits.safetensors'
    res = run_cli(
        'export.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', ckpt,
        '--format', 'safetensors', '--output', out,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    exported = load_file(out)
    trained_state = torch.load(ckpt, weights_only=True)['model']
    assert sorted(exported) == sorted(trained_state)
    for key, tensor in trained_state.items():
        assert torch.equal(exported[key], tensor), key
    # the config beside it builds the same model, which takes the exported weights
    cfg = Config(cfg_file=str(out.with_suffix('.yaml')))
    assert cfg.SOLVER.WORK_DIR == str(work) and cfg.SOLVER.MODEL.BACKBONE.HIDDEN_DIMS == [256, 256]
    model = MODELS.build(cfg.SOLVER.MODEL)
    load_state_dict_checked(model, exported, str(out))
    assert not [p for p in os.listdir(out.parent) if p.startswith('.tmp.')]


def test_export_onnx_matches_torch(trained, tmp_path):
    ort = pytest.importorskip('onnxruntime', reason="ONNX export is the optional extra 'onnx' (CI installs it)")
    pytest.importorskip('onnxscript', reason="ONNX export is the optional extra 'onnx' (CI installs it)")
    work, ckpt = trained
    out = tmp_path / 'digits.onnx'
    res = run_cli(
        'export.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', '--checkpoint', ckpt,
        '--format', 'onnx', '--output', out,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    m = re.search(r"inputs \['img'\], outputs \['logits'\].* max abs diff ([0-9.e+-]+)", res.stdout)
    assert m and float(m.group(1)) <= 1e-4, res.stdout[-1000:]
    assert 'torchvision' not in res.stderr and 'Warning' not in res.stderr, res.stderr  # torch's noise stays out

    # independently: another batch size than the sample's (dynamic batch), against torch
    solver = _digits_solver(ckpt, f'SOLVER.WORK_DIR={tmp_path / "w"}')
    images = solver.datas['test'].dataset.arrays['img'][:37]
    session = ort.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    assert [i.name for i in session.get_inputs()] == ['img']
    (onnx_logits,) = session.run(['logits'], {'img': images.numpy()})
    expected = solver.predict({'img': images})['logits']
    np.testing.assert_allclose(onnx_logits, expected, atol=1e-5, rtol=1e-4)


def test_inference_and_export_without_cfg_build_the_model_the_checkpoint_describes(trained, tmp_path):
    from scepter_like.utils.checkpoint import read_safetensors_metadata

    work, ckpt = trained
    desc = torch.load(ckpt, weights_only=True)['model_description']
    assert desc['architecture'] == 'Classifier' and desc['config']['BACKBONE']['HIDDEN_DIMS'] == [256, 256]
    assert 'scepter_like.model.classifier' in desc['imports'] and 'PRETRAINED_MODEL' not in desc['config']
    images = _digits_solver(ckpt, f'SOLVER.WORK_DIR={tmp_path / "w"}').datas['test'].dataset.arrays['img'][:20]
    np.savez(tmp_path / 'x.npz', img=images.numpy())
    common = ['--checkpoint', ckpt, '--input', tmp_path / 'x.npz']
    res = run_cli('run_inference.py', *common, '--output', tmp_path / 'alone.npz', cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli('run_inference.py', '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={work}', *common,
                   '--output', tmp_path / 'with_cfg.npz')  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(tmp_path / 'alone.npz') as alone, np.load(tmp_path / 'with_cfg.npz') as with_cfg:
        np.testing.assert_array_equal(alone['logits'], with_cfg['logits'])

    out = tmp_path / 'export' / 'digits.safetensors'
    res = run_cli('export.py', '--checkpoint', ckpt, '--format', 'safetensors', '--output', out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(read_safetensors_metadata(out)['model_description']) == desc

    torch.save(torch.load(ckpt, weights_only=True)['model'], tmp_path / 'bare.pth')  # a state dict: no description
    res = run_cli('run_inference.py', '--checkpoint', tmp_path / 'bare.pth', '--input', tmp_path / 'x.npz',
                   '--output', tmp_path / 'bare.npz')  # fmt: skip
    _one_error_line(res, r'bare\.pth does not describe its model .*give --cfg')
    res = run_cli('export.py', *common[:2], '--format', 'onnx', '--output', tmp_path / 'x.onnx', 'SOLVER.MAX_EPOCHS=2')
    _one_error_line(res, r"override 'SOLVER.MAX_EPOCHS=2' needs --cfg")


@pytest.mark.parametrize('tool', ['run_eval.py', 'export.py'])
def test_checkpoint_that_does_not_fit_the_model_is_one_error_line(trained, tool, tmp_path):
    work, ckpt = trained
    extra = ['--format', 'safetensors', '--output', tmp_path / 'x.safetensors'] if tool == 'export.py' else []
    res = run_cli(
        tool, '--cfg', DIGITS_CFG, f'SOLVER.WORK_DIR={tmp_path / "w"}', 'SOLVER.MODEL.BACKBONE.HIDDEN_DIMS=[32]',
        '--checkpoint', ckpt, *extra,
    )  # fmt: skip
    _one_error_line(res, r'weights in .*digits-last\.pth do not fit the model .*mis-shaped: backbone\.0\.weight')
    assert not (tmp_path / 'x.safetensors').exists() and not (tmp_path / 'w' / 'metrics.json').exists()


def test_run_eval_under_torchrun_gives_the_same_numbers(trained, tmp_path):
    work, ckpt = trained
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2']
    cmd += [
        os.path.join(TOOLS, 'run_eval.py'),
        '--cfg',
        DIGITS_CFG,
        f'SOLVER.WORK_DIR={tmp_path}',
        '--checkpoint',
        ckpt,
    ]
    res = subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    logged = torch.load(ckpt, weights_only=True)['solver']['epoch_outputs']
    record = json.loads((tmp_path / 'metrics.json').read_text())
    assert record['eval'] == logged['eval'] and record['test'] == logged['test']  # reduced over both ranks


def test_a_description_never_makes_a_tool_import_a_file_it_names(trained, tmp_path):
    """A checkpoint is data: a .py path in its description is not imported (no code of the file's choosing runs)."""
    _, ckpt = trained
    marker = tmp_path / 'ran'
    evil = tmp_path / 'evil.py'
    evil.write_text(f'open({str(marker)!r}, "w").close()\n')
    state = torch.load(ckpt, weights_only=True)
    state['model_description'] = dict(state['model_description'], architecture='EvilModel', imports=[str(evil)])
    torch.save(state, tmp_path / 'crafted.pth')
    np.savez(tmp_path / 'x.npz', img=np.zeros((2, 64), dtype=np.float32))
    res = run_cli('run_inference.py', '--checkpoint', tmp_path / 'crafted.pth', '--input', tmp_path / 'x.npz',
                   '--output', tmp_path / 'y.npz', cwd=tmp_path)  # fmt: skip
    _one_error_line(
        res, r'describes a EvilModel, registered by .*evil\.py: a \.py path the file names is never imported'
    )
    assert not marker.exists()


def test_inference_imports_a_users_model_file_by_its_path_when_the_checkpoint_names_its_module(tmp_path):
    """Trained with IMPORTS: [my_net] in its folder; inferred from elsewhere with --import path/my_net.py."""
    import yaml
    from helpers import blob_solver_cfg, write_blobs

    train_dir, other = tmp_path / 'project', tmp_path / 'elsewhere'
    train_dir.mkdir()
    other.mkdir()
    (train_dir / 'my_net.py').write_text(
        'from scepter_like.model.classifier import Classifier\n'
        'from scepter_like.model.registry import MODELS\n\n\n'
        '@MODELS.register_class()\nclass MyNetClassifier(Classifier):\n    pass\n'
    )
    npz = write_blobs(train_dir / 'blobs.npz')
    cfg = blob_solver_cfg(npz, train_dir / 'run', [{'NAME': 'BackwardHook'}, {'NAME': 'CheckpointHook'}], MAX_EPOCHS=1)
    cfg['IMPORTS'] = ['my_net']
    cfg['SOLVER']['MODEL']['NAME'] = 'MyNetClassifier'
    (train_dir / 'job.yaml').write_text(yaml.safe_dump(cfg))
    res = run_cli('run_train.py', '--cfg', train_dir / 'job.yaml', cwd=train_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(npz) as data:
        np.savez(other / 'x.npz', img=data['x'][:5])
    res = run_cli(
        'run_inference.py', '--checkpoint', train_dir / 'run', '--input', other / 'x.npz', '--output',
        other / 'y.npz', '--import', train_dir / 'my_net.py', cwd=other,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(other / 'y.npz') as y:
        assert y['logits'].shape == (5, 3)


OUTPUT_CASES = {  # tool args from tmp_path (holding a folder 'taken' and a file 'afile'), the one error line
    'inference into a folder': (
        lambda t: ['run_inference.py', '--checkpoint', t / 'none', '--output', t / 'taken'],
        r'--output .*taken is a folder; give the file to write, e\.g\. .*taken/out\.npz$',
    ),
    'inference to a .csv': (  # an npz zip was written under the .csv name
        lambda t: ['run_inference.py', '--checkpoint', t / 'none', '--output', t / 'pred.csv'],
        r'--output .*pred\.csv: this tool writes a \.npz file; name it .*pred\.npz$',
    ),
    'inference under a file': (
        lambda t: ['run_inference.py', '--checkpoint', t / 'none', '--output', t / 'afile' / 'y.npz'],
        r'--output .*afile/y\.npz: .*afile is a file, not a folder; give another path$',
    ),
    'export into a folder': (
        lambda t: ['export.py', '--checkpoint', t / 'none', '--format', 'safetensors', '--output', t / 'taken'],
        r'--output .*taken is a folder; give the file to write, e\.g\. .*taken/out\.safetensors$',
    ),
    'onnx export to .safetensors': (
        lambda t: ['export.py', '--checkpoint', t / 'none', '--format', 'onnx', '--output', t / 'm.safetensors'],
        r'--output .*m\.safetensors: this tool writes a \.onnx file; name it .*m\.onnx$',
    ),
    'find_lr into a file': (  # the sweep ran to its end, then its result was lost at the write
        lambda t: ['find_lr.py', '--cfg', DIGITS_CFG, '--output', t / 'afile'],
        r'--output .*afile is a file; give a folder to write into \(made when missing\)$',
    ),
}


@pytest.mark.parametrize('case', sorted(OUTPUT_CASES))
def test_an_output_path_the_tool_cannot_write_is_one_error_line_before_the_work(case, tmp_path):
    (tmp_path / 'taken').mkdir()
    (tmp_path / 'afile').write_text('kept\n')
    make_args, pattern = OUTPUT_CASES[case]
    res = run_cli(*make_args(tmp_path), cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and re.match(f'error: {pattern}', lines[0]), res.stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == ['afile', 'taken'] and not os.listdir(tmp_path / 'taken')
    assert (tmp_path / 'afile').read_text() == 'kept\n'
