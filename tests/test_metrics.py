"""Classification metrics against scikit-learn, and exact under torchrun."""

import pytest
import torch
from conftest import torchrun_worker_values
from sklearn.metrics import precision_recall_fscore_support

from scepter_like.errors import DataError
from scepter_like.metric import METRICS


def sklearn_macro(logits, label):
    pred = logits.argmax(1).numpy()
    p, r, f, _ = precision_recall_fscore_support(label.numpy(), pred, average='macro', zero_division=0)
    return {'precision': p, 'recall': r, 'f1': f}


@pytest.mark.parametrize('seed', range(6))
def test_f1_metric_equals_sklearn_macro_over_batches(seed):
    g = torch.Generator().manual_seed(seed)
    classes, n = 2 + seed, 40 + 7 * seed
    logits, label = torch.randn(n, classes, generator=g), torch.randint(0, classes, (n,), generator=g)
    if seed % 2:
        label[label == 1] = 0  # a class the labels lack (it may still be predicted)
    metric = METRICS.build({'NAME': 'F1Metric'})
    for part in (slice(0, n // 3), slice(n // 3, None)):
        metric.update({'logits': logits[part], 'label': label[part]})
    got, want = metric.compute(), sklearn_macro(logits, label)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_f1_metric_sees_the_class_that_accuracy_hides():
    """95 of 100 labels are class 0 and the model always says 0: accuracy 0.95, macro recall 0.5, f1 about 0.49."""
    label = torch.tensor([0] * 95 + [1] * 5)
    logits = torch.tensor([[1.0, 0.0]]).repeat(100, 1)
    data = {'logits': logits, 'label': label}
    accuracy, f1 = (METRICS.build({'NAME': name}) for name in ('AccuracyMetric', 'F1Metric'))
    accuracy.update(data)
    f1.update(data)
    assert accuracy.compute()['accuracy'] == pytest.approx(0.95)
    assert f1.compute() == pytest.approx(sklearn_macro(logits, label))
    assert f1.compute()['recall'] == pytest.approx(0.5)


def test_f1_metric_refuses_labels_outside_the_classes():
    metric = METRICS.build({'NAME': 'F1Metric'})
    metric.update({'logits': torch.zeros(3, 2), 'label': torch.tensor([0, 1, 2])})
    with pytest.raises(DataError, match=r'^F1Metric: of 3 labels, 0 are below 0 and 1 at or above 2'):
        metric.compute()


def test_f1_metric_under_two_process_torchrun_with_an_empty_rank(tmp_path):
    values = torchrun_worker_values('class_metric_worker', tmp_path)
    from class_metric_worker import scores

    assert values == pytest.approx(sklearn_macro(*scores()), rel=1e-12)


def test_output_means_under_two_process_torchrun_are_exact_over_uneven_ranks(tmp_path):
    """Each name's mean over the samples of every rank, names one rank never saw included."""
    values = torchrun_worker_values('output_means_worker', tmp_path)
    from output_means_worker import expected

    assert list(values) == ['val_loss', 'aux', 'extra'] and values == pytest.approx(expected(), rel=1e-12)
