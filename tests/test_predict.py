"""solver.predict in-process: batched eval-mode forward, mode restored, clear errors."""

import warnings

import numpy as np
import pytest
import torch
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import DataError


@pytest.fixture
def solver(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz', n=40)
    cfg = blob_solver_cfg(npz, tmp_path / 'work')
    cfg['SOLVER']['MODEL']['BACKBONE']['DROPOUT'] = 0.5  # train and eval forwards differ
    return build_solver(cfg)


def test_predict_is_a_batched_eval_forward_and_restores_the_mode(solver):
    x = np.random.default_rng(0).normal(size=(37, 8)).astype(np.float32)
    model = solver.unwrapped_model
    model.train()
    out = solver.predict({'img': x}, batch_size=5)  # 8 batches, the last one of 2
    assert model.training  # the previous mode is back
    assert list(out) == ['logits'] and isinstance(out['logits'], np.ndarray) and out['logits'].shape == (37, 3)
    model.eval()
    with torch.no_grad():
        manual = model(img=torch.from_numpy(x))['logits'].numpy()
    np.testing.assert_allclose(out['logits'], manual, rtol=1e-5, atol=1e-6)
    # tensors in, labels passed through as the model returns them, eval mode kept
    out2 = solver.predict({'img': torch.from_numpy(x), 'label': torch.arange(37)}, batch_size=64)
    assert not model.training
    np.testing.assert_allclose(out2['logits'], manual, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out2['label'], np.arange(37))


def test_predict_needs_no_grad(solver):
    grad_seen = []
    solver.unwrapped_model.register_forward_hook(lambda m, i, o: grad_seen.append(torch.is_grad_enabled()))
    solver.predict({'img': np.zeros((3, 8), np.float32)})
    assert grad_seen == [False]


@pytest.mark.parametrize(
    'inputs, pattern',
    [
        ({'x': np.zeros((3, 8), np.float32)}, r"the model needs input 'img', which the inputs lack; they have \['x'\]"),
        ({'img': np.zeros((3, 8)), 'label': np.zeros(2)}, r'one equally long first .*img.: 3, .label.: 2'),
        ({}, r'non-empty dict'),
        (  # one sample of the train data's shape ([8]): not 8 samples of one number
            {'img': np.zeros(8, np.float32)},
            r"^predict inputs \{'img': \[8\]\} are the shape of one sample of the train data, without the batch axis:"
            r' give a batch, .*x\[None\]',
        ),
        ({'img': np.zeros((0, 8)), 'label': np.zeros(0)}, r'^predict got no samples: the inputs hold 0 rows'),
        (
            {'img': np.zeros((3, 5), np.float32)},
            r'at its input: .*; give inputs of the sizes the model takes \(.*IN_DIM',
        ),
        (
            {'img': [[1, 2, 3, 4, 5, 6, 7, 8]]},
            r"img: int64: .*; set their dtypes in the inputs you give \(numpy: x\.astype\('float32'\)\)",
        ),
    ],
)
def test_predict_bad_inputs_are_data_errors(solver, inputs, pattern):
    with pytest.raises(DataError, match=pattern):
        solver.predict(inputs)
    assert solver.unwrapped_model.training  # restored after a failure too


def test_forward_signature_mismatches_are_data_errors_and_onnx_finds_required_inputs():
    from scepter_like.solver.model_call import forward_checked
    from scepter_like.solver.onnx_export import required_inputs

    class Plain(torch.nn.Module):  # an ordinary forward: named inputs, an optional label
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, feat, label=None):
            return {'logits': self.fc(feat)}

    model, feat = Plain(), torch.randn(3, 4)
    assert required_inputs(model, {'feat': feat, 'label': torch.zeros(3)}) == ['feat']
    with pytest.raises(DataError, match=r"the model needs input\(s\) \['feat'\], which the inputs lack"):
        forward_checked(model, {'label': torch.zeros(3)})
    with pytest.raises(DataError, match=r"the model's forward takes no \['img'\]"):
        forward_checked(model, {'feat': feat, 'img': feat})


def test_image_inputs_of_another_layout_or_not_arrays_are_one_line_saying_what_the_model_takes():
    """NHWC images named HEAD.DIM; a list of file paths and one image without its batch axis raised raw errors."""
    from scepter_like.model import size_mismatch
    from scepter_like.model.registry import MODELS
    from scepter_like.solver.predict import predict

    model = MODELS.build(
        {'NAME': 'Classifier', 'BACKBONE': {'NAME': 'ConvNet', 'IN_CHANNELS': 3, 'CHANNELS': [4], 'OUT_DIM': 2}}
    )
    images = np.random.default_rng(0).random((2, 8, 8, 3), dtype=np.float32)  # as PIL / numpy read them: HWC
    cpu = torch.device('cpu')
    layout = r'images go into the model as \[N, C, H, W\] floats .* these are \[N, H, W, C\]'
    with pytest.raises(DataError, match=layout):
        predict(model, {'img': images}, 4, cpu)
    for paths in (['a.png', 'b.png'], np.array(['a.png', 'b.png'])):
        with pytest.raises(DataError, match=r"^predict input 'img' holds str values, not numbers: .* reads no files$"):
            predict(model, {'img': paths}, 4, cpu)
    read_only = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    read_only.flags.writeable = False  # as np.asarray(a PIL image) gives
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # torch warns of a read-only array it would share
        assert predict(model, {'img': read_only}, 4, cpu)['logits'].shape == (2, 2)
    unbatched = ValueError('expected 4D input (got 3D input)')  # BatchNorm2d's word for one image without its axis
    why = size_mismatch.explain(model, {'img': torch.zeros(3, 8, 8)}, unbatched, trained=True)
    assert why.endswith(
        'expected 4D input (got 3D input); give a batch: the inputs need their sample axis first (one'
        ' sample x as x[None])'
    )
    assert predict(model, {'img': images.transpose(0, 3, 1, 2)}, 4, cpu)['logits'].shape == (2, 2)


@pytest.mark.parametrize(
    'layer, x',
    [
        (torch.nn.Conv2d(1, 2, 3), torch.zeros(8, 8)),  # 'Expected 3D (unbatched) or 4D (batched) input to conv2d'
        (torch.nn.BatchNorm2d(2), torch.zeros(2, 8, 8)),  # 'expected 4D input (got 3D input)'
        (torch.nn.MaxPool2d(2), torch.zeros(8, 8)),  # '3D or 4D (batch mode) tensor expected for input'
    ],
)
def test_torch_words_for_an_input_without_its_batch_axis_each_get_the_batch_advice(layer, x):
    from scepter_like.model import size_mismatch
    from scepter_like.model.registry import MODELS

    model = MODELS.build({'NAME': 'Classifier', 'BACKBONE': {'NAME': 'ConvNet', 'CHANNELS': [4], 'OUT_DIM': 2}})
    with pytest.raises((RuntimeError, ValueError)) as raised:  # the message of the torch in use
        layer(x)
    why = size_mismatch.explain(model, {'img': x}, raised.value, trained=True)
    assert why is not None and why.endswith(
        'give a batch: the inputs need their sample axis first (one sample x as x[None])'
    )


def test_predict_takes_reversed_and_flipped_numpy_views(solver):
    x = np.random.default_rng(0).normal(size=(6, 8))
    expected = solver.predict({'img': np.ascontiguousarray(x[::-1, ::-1])})['logits']
    np.testing.assert_array_equal(solver.predict({'img': x[::-1, ::-1]})['logits'], expected)  # negative strides
    np.testing.assert_array_equal(solver.predict({'img': np.flip(x)})['logits'], expected)


class Frame:
    """What predict reads of a pandas DataFrame: ``columns``, ``frame[list of names]``, ``numpy.asarray(frame)``."""

    def __init__(self, values, columns):
        self.values, self.columns = np.asarray(values), list(columns)

    def __getitem__(self, names):
        return Frame(self.values[:, [self.columns.index(n) for n in names]], names)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


def test_predict_orders_a_dataframe_by_the_training_tables_column_names(tmp_path):
    rng = np.random.default_rng(0)
    names = ['f0', 'f1', 'f2', 'f3']
    x = rng.normal(size=(40, 4))
    rows = [','.join(map(str, [*r, 'ab'[int(r[0] > 0)]])) for r in x]
    (tmp_path / 't.csv').write_text('\n'.join([','.join([*names, 'kind']), *rows]) + '\n')
    data = {'NAME': 'CsvDataset', 'PATH': str(tmp_path / 't.csv'), 'LABEL_COLUMN': 'kind', 'BATCH_SIZE': 8}
    cfg = blob_solver_cfg('', tmp_path / 'work', TRAIN_DATA=data, EVAL_DATA=None)
    cfg['SOLVER']['MODEL'].update(INPUT_KEY='x', BACKBONE={'NAME': 'MLP', 'IN_DIM': 4, 'OUT_DIM': 2})
    solver = build_solver(cfg)
    expected = solver.predict({'x': x})['logits']
    shuffled = ['f2', 'f0', 'f3', 'f1']
    frame = Frame(x, names)[shuffled]
    np.testing.assert_array_equal(solver.predict({'x': frame})['logits'], expected)  # by name, not by place
    with pytest.raises(DataError, match=r"'x' is a DataFrame without the column\(s\) \['f3'\] .*\['f0', 'f1', 'f2'"):
        solver.predict({'x': Frame(x[:, :3], names[:3])})
    assert not np.array_equal(solver.predict({'x': np.asarray(frame)})['logits'], expected)  # an array: as it is


class NullableFrame(Frame):
    """A DataFrame holding pandas' nullable (Int64, boolean) or bool columns beside floats: ``numpy.asarray`` gives
    objects (pd.NA as None here), ``to_numpy(dtype, na_value)`` numbers; ``dtypes`` by column."""

    def __init__(self, values, columns, kinds):
        super().__init__(np.asarray(values, dtype=object), columns)
        self.dtypes = dict(zip(columns, (np.dtype(kind) for kind in kinds)))

    def to_numpy(self, dtype=None, na_value=None):
        return np.array([[na_value if v is None else v for v in row] for row in self.values], dtype=dtype)


def test_predict_takes_a_dataframes_nullable_and_bool_columns_as_numbers(solver):
    """A nullable Int64 or a bool column was 'holds DataFrame values, not numbers', while an all-int frame worked."""
    x = np.random.default_rng(0).integers(0, 4, size=(6, 8)).astype(np.float64)
    x[:, 4] = x[:, 4] > 0  # column 4 a bool one
    cells = [[int(v) if j < 4 else bool(v) if j == 4 else float(v) for j, v in enumerate(row)] for row in x]
    kinds = ['int64'] * 4 + ['bool'] + ['float64'] * 3
    frame = NullableFrame(cells, [f'f{i}' for i in range(8)], kinds)
    np.testing.assert_array_equal(solver.predict({'img': frame})['logits'], solver.predict({'img': x})['logits'])
    cells[3][1] = None  # pd.NA: a missing value, refused as NaN naming the row
    with pytest.raises(DataError, match=r"^predict input 'img': NaN or inf in 1 row\(s\), the first at row 3 "):
        solver.predict({'img': NullableFrame(cells, frame.columns, kinds)})
    cells[3][1], cells[2][0] = 1, 'NAmes'
    with pytest.raises(DataError, match=r"^predict input 'img' is a DataFrame whose column\(s\) \['f0'\] hold text"):
        solver.predict({'img': NullableFrame(cells, frame.columns, ['O'] + kinds[1:])})


def test_predict_refuses_nan_or_inf_inputs_naming_the_first_row(solver):
    """NaN features gave NaN logits (argmax: class 0) without a word, while training refuses such data."""
    x = np.zeros((6, 8), np.float32)
    x[4, 2], x[5, 0] = np.nan, np.inf
    with pytest.raises(DataError, match=r"^predict input 'img': NaN or inf in 2 row\(s\), the first at row 4 "):
        solver.predict({'img': x})
    assert solver.predict({'img': x[:4]})['logits'].shape == (4, 3)
