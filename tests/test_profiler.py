"""ProfilerHook: a Chrome trace and a summary table for the scheduled window; no CUDA call on CPU."""

import json

import torch
from helpers import blob_solver_cfg, build_solver, write_blobs


def test_trace_and_summary_written_then_profiler_stops(tmp_path, monkeypatch, capfd):
    def no_cuda(*args):
        raise AssertionError('NVTX must not be called without CUDA')

    monkeypatch.setenv('SCEPTER_NVTX', '1')
    monkeypatch.setattr(torch.cuda.nvtx, 'range_push', no_cuda)
    npz = write_blobs(tmp_path / 'd.npz', n=96)  # 6 steps
    prof = {'NAME': 'ProfilerHook', 'START_STEP': 1, 'WAIT': 1, 'WARMUP': 1, 'ACTIVE': 2}
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=[{'NAME': 'BackwardHook'}, prof], MAX_EPOCHS=1)
    solver = build_solver(cfg)
    hook = solver.hooks_dict['train'][0]
    assert type(hook).__name__ == 'ProfilerHook'  # PRIORITY -100: before BackwardHook
    solver.solve()

    out = tmp_path / 'w' / 'profiler'
    assert sorted(p.name for p in out.iterdir()) == ['summary-rank0-step5.txt', 'trace-rank0-step5.json']
    trace = json.loads((out / 'trace-rank0-step5.json').read_text())
    names = {e.get('name', '') for e in trace['traceEvents']}
    assert any(n.startswith('aten::') for n in names)
    assert {'ProfilerStep#3', 'ProfilerStep#4'} <= names  # the two active steps, nothing else recorded
    assert not {'ProfilerStep#2', 'ProfilerStep#5'} & names
    summary = (out / 'summary-rank0-step5.txt').read_text()
    assert 'Self CPU' in summary and 'aten::' in summary
    assert hook.profiler is None and hook._done
    assert 'USDT' not in capfd.readouterr().err  # kineto's profiler_start / profiler_stop lines stay out


def test_quiet_profiler_drops_only_kineto_lines(capfd):
    import os

    from scepter_like.utils.torch_noise import quiet_profiler

    with quiet_profiler():
        os.write(2, b'USDT:2026-12-02 01:20:29 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n')
        os.write(2, b'a real problem\n')
    assert capfd.readouterr().err == 'a real problem\n'
