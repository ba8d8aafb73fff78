"""Test-only registrations for the torch.compile tests (imported in process, or by tools with ``--import``).

- the torch.compile backend ``scepter_test_failing``, which raises on every graph it is given:
  a compile failure that shows at the first forward, as real ones do;
- the backend ``scepter_test_counting``, which runs every graph as dynamo traced it and
  appends it to ``COMPILED_GRAPHS``: how many graphs a run compiled;
- ``EagerOnlyClassifier``: a Classifier whose class declares COMPILE_INCOMPATIBLE.
"""

import torch._dynamo

from scepter_like.model.classifier import Classifier
from scepter_like.model.registry import MODELS

FAILING_BACKEND = 'scepter_test_failing'
INCOMPATIBLE_REASON = 'its forward calls a C extension dynamo cannot trace'


def _failing_backend(graph_module, example_inputs):
    raise RuntimeError('the test backend refuses every graph')


def _counting_backend(graph_module, example_inputs):
    COMPILED_GRAPHS.append(graph_module)
    return graph_module.forward


COUNTING_BACKEND = 'scepter_test_counting'
COMPILED_GRAPHS = []
for name, backend in ((FAILING_BACKEND, _failing_backend), (COUNTING_BACKEND, _counting_backend)):
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(backend, name=name)


@MODELS.register_class()
class EagerOnlyClassifier(Classifier):
    COMPILE_INCOMPATIBLE = INCOMPATIBLE_REASON
