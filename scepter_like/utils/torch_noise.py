"""Keep torch's known noise out of a run's output, only around the calls that make it.

Each context silences named messages, nothing else: a real warning from the same call
still shows.

- ``quiet_onnx_export``: ``torch.onnx.export(dynamo=True)`` logs a warning per torchvision
  operator when torchvision is not installed (it is not used here) and raises a
  FutureWarning about ``LeafSpec`` from torch's own pytree code.
- ``quiet_profiler``: kineto writes ``USDT: ... profiler_start`` / ``profiler_stop`` lines
  straight to file descriptor 2 whenever a profiler trace starts or stops; the block
  runs with fd 2 captured and every other line is written back to stderr after it.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings

ONNX_REGISTRATION_LOGGER = 'torch.onnx._internal.exporter._registration'
ONNX_TORCHVISION_SKIP = 'torchvision is not installed'
PYTREE_LEAFSPEC_WARNING = r'`isinstance\(treespec, LeafSpec\)` is deprecated'
KINETO_USDT_LINE = re.compile(r'USDT:.*\] profiler_(start|stop)\s*$')


def _not_torchvision_skip(record):
    return not record.getMessage().startswith(ONNX_TORCHVISION_SKIP)


@contextlib.contextmanager
def quiet_onnx_export():
    registration = logging.getLogger(ONNX_REGISTRATION_LOGGER)
    registration.addFilter(_not_torchvision_skip)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message=PYTREE_LEAFSPEC_WARNING, category=FutureWarning)
            yield
    finally:
        registration.removeFilter(_not_torchvision_skip)


@contextlib.contextmanager
def quiet_profiler():
    with _stderr_without(KINETO_USDT_LINE):
        yield


@contextlib.contextmanager
def _stderr_without(pattern):
    """Run the block with fd 2 going to a temp file; then write its lines not matching ``pattern`` to stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                captured.seek(0)
                text = captured.read().decode(errors='replace')
                kept = ''.join(line for line in text.splitlines(keepends=True) if not pattern.match(line))
                if kept:
                    sys.stderr.write(kept)
                    sys.stderr.flush()
    finally:
        os.close(saved)
