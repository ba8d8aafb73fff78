#!/usr/bin/env python
"""The hand-written baseline: plain PyTorch, no toolkit.

``python benchmarks/hand_loop.py --workload mlp --data x.npz --steps 3000 --out r.json``

The honest fast loop: the data sits in tensors, each epoch picks batches by a seeded
permutation (``index_select``, the fastest form), AdamW with a per-epoch cosine
schedule, a log line (``loss.item()``) every ``log_interval`` steps, one checkpoint at
the end.  It times the span between the end of the first and the end of the last step,
as the solver's StepTimerHook does (wall clock and process CPU time).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn
from workloads import LEARNING_RATE, SEED, plan


def load_tensors(path):
    """The workload's inputs and labels from its .npz, as tensors."""
    with np.load(path) as data:
        return torch.as_tensor(data['x']), torch.as_tensor(data['y'])


def build_model(name, w):
    if name == 'mlp':
        layers, dim = [nn.Flatten()], w['shape'][0]
        for width in w['hidden']:
            layers += [nn.Linear(dim, width), nn.ReLU()]
            dim = width
        return nn.Sequential(*layers, nn.Linear(dim, w['classes']))
    layers, ch = [], w['shape'][0]
    for i, out in enumerate(w['channels']):
        layers += [nn.Conv2d(ch, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
        if i < len(w['channels']) - 1:
            layers.append(nn.MaxPool2d(2))
        ch = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, w['classes']))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--workload', default='mlp')
    parser.add_argument('--data', required=True)
    parser.add_argument('--steps', type=int, default=None)
    parser.add_argument('--out', required=True)
    parser.add_argument('--work-dir', default='.')
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    w, epochs, steps = plan(args.workload, args.steps)
    x, y = load_tensors(args.data)
    model = build_model(args.workload, w)
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    batch, spe, interval = w['batch'], w['steps_per_epoch'], w['log_interval']
    done, first, last, first_cpu, last_cpu, first_wall = 0, 0.0, 0.0, 0.0, 0.0, 0.0
    durations = []
    model.train()
    for epoch in range(epochs):
        g = torch.Generator()
        g.manual_seed(SEED + epoch)
        perm = torch.randperm(len(x), generator=g)
        for i in range(spe):
            idx = perm[i * batch : (i + 1) * batch]
            loss = nn.functional.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
            if done % interval == 0:
                print(f'epoch {epoch + 1} step {done} loss {loss.item():.4f} lr {opt.param_groups[0]["lr"]:.4g}')
            now, cpu = time.perf_counter(), time.process_time()
            if done == 1:
                first, first_cpu, first_wall = now, cpu, time.time()
            else:
                durations.append(now - last)
            last, last_cpu = now, cpu
        sched.step()
    torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()}, os.path.join(args.work_dir, 'last.pth'))
    result = {'steps': done, 'span_s': last - first, 'cpu_s': last_cpu - first_cpu, 'first_step_wall': first_wall}
    result['us_per_step'] = result['span_s'] / max(done - 1, 1) * 1e6
    result['cpu_us_per_step'] = result['cpu_s'] / max(done - 1, 1) * 1e6
    result['median_step_us'] = statistics.median(durations) * 1e6 if durations else 0.0
    with open(args.out, 'w') as f:
        json.dump(result, f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
