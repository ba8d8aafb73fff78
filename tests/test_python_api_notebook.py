"""examples/python_api.ipynb runs in a real Jupyter kernel (nbclient + ipykernel): train, test, predict.

The kernel starts where Jupyter starts it, in the notebook's own folder: examples/ of a fresh
folder that holds the repository's configs/ and tasks/ (links) beside it, as the repository
does, so the notebook finds its top folder itself and the run's WORK_DIR lands in the test's
folder.
"""

import ast
import os

import pytest
from conftest import REPO

NOTEBOOK = os.path.join(REPO, 'examples', 'python_api.ipynb')


def stream_text(cell):
    return ''.join(output.get('text', '') for output in cell.get('outputs', []) if output['output_type'] == 'stream')


def result_text(cell):
    return ''.join(
        output['data'].get('text/plain', '')
        for output in cell.get('outputs', [])
        if output['output_type'] == 'execute_result'
    )


@pytest.mark.slow
def test_the_notebook_trains_tests_and_predicts_in_a_jupyter_kernel(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    for name in ('configs', 'tasks'):
        os.symlink(os.path.join(REPO, name), tmp_path / name)
    (tmp_path / 'examples').mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    here = str(tmp_path / 'examples')  # the notebook's folder: where Jupyter, nbclient and jupyter-execute start it
    NotebookClient(nb, timeout=600, kernel_name='python3', resources={'metadata': {'path': here}}).execute()
    code = [cell for cell in nb.cells if cell.cell_type == 'code']
    assert ast.literal_eval(result_text(code.pop(0))) == str(tmp_path)  # it moved to the top folder
    errors = [o for cell in code for o in cell.get('outputs', []) if o['output_type'] == 'error']
    assert not errors, errors
    fit_log = stream_text(code[0])
    assert 'INFO eval epoch 5/5 (144 samples): accuracy: ' in fit_log  # the log, as on the command line
    assert 'epoch 5/5 [' in fit_log and '41/41' in fit_log  # the progress bar of each epoch
    assert ' WARNING ' not in fit_log  # the first run a newcomer sees (CheckpointHook INTERVAL 10, 5 epochs)
    (evaluation,) = ast.literal_eval(result_text(code[1]))
    assert evaluation['epoch'] == 5 and evaluation['step'] == 205 and evaluation['accuracy'] > 0.9
    assert ast.literal_eval(result_text(code[2]))['accuracy'] > 0.9  # the test split with the best weights
    predicted = stream_text(code[3])
    assert predicted.startswith('predicted: [0 1 2 3 4') and 'true: [0 1 2 3 4 5 6 7]' in predicted
    (run,) = os.listdir(tmp_path / 'work_dir' / 'notebook')
    assert os.path.isfile(tmp_path / 'work_dir' / 'notebook' / run / 'checkpoints' / 'digits-best.pth')
