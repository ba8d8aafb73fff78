#!/usr/bin/env python
"""The hand-written baseline: the workload's training in plain PyTorch, nothing of the toolkit.

``python benchmarks/hand_loop.py WORKLOAD DATA.npz OUT.json [STEPS]`` runs it in a process of
its own (``common.launch``, ``common.launch_taking_turns``) and writes its StepClock result; the others use
``HandLoop`` in their own process.

The honest fast loop: the data sits in tensors, each epoch picks batches by a seeded
permutation (``index_select``), AdamW with a per-epoch cosine schedule, a ``loss.item()``
line every LOG_INTERVAL steps.  Under torch.distributed the model is wrapped in DDP, each
rank takes every world-size-th sample of the permutation, and a log line shows the loss
all-reduced over the ranks, as timm's train.py logs it (one all-reduce per line; the
solver's LogHook also reports the mean over ranks).
"""

import json
import sys

import numpy as np
import torch
import torch.distributed as dist
from common import BATCH, CLASSES, LEARNING_RATE, LOG_INTERVAL, SEED, StepClock, plan, side_clock
from torch import nn


def build_model(workload, w):
    if workload == 'mlp':
        layers, dim = [nn.Flatten()], w['shape'][0]
        for width in w['hidden']:
            layers += [nn.Linear(dim, width), nn.ReLU()]
            dim = width
        return nn.Sequential(*layers, nn.Linear(dim, CLASSES))
    layers, ch = [], w['shape'][0]
    for i, out in enumerate(w['channels']):
        layers += [nn.Conv2d(ch, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
        if i < len(w['channels']) - 1:
            layers.append(nn.MaxPool2d(2))
        ch = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, CLASSES))


class HandLoop:
    """The workload's training loop, resumable: ``run(n)`` trains the next n steps and ticks ``clock`` after each."""

    def __init__(self, workload, data, steps=None, clock=None, log=sys.stderr):
        w, self.epochs, _ = plan(workload, steps)
        with np.load(data) as arrays:
            self.x, self.y = torch.as_tensor(arrays['x']), torch.as_tensor(arrays['y'])
        torch.manual_seed(SEED)
        self.model = build_model(workload, w)
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        if self.world > 1:
            self.model = nn.parallel.DistributedDataParallel(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=self.epochs)
        self.steps_per_epoch = w['steps_per_epoch'] // self.world
        self.total = self.epochs * self.steps_per_epoch
        self.clock, self.log, self.done, self.perm = clock or StepClock(), log, 0, None
        self.model.train()

    def run(self, steps):
        spe, tick = self.steps_per_epoch, self.clock.tick
        for _ in range(steps):
            i = self.done % spe
            if i == 0:
                g = torch.Generator()
                g.manual_seed(SEED + self.done // spe)
                self.perm = torch.randperm(len(self.x), generator=g)[self.rank :: self.world]
            idx = self.perm[i * BATCH : (i + 1) * BATCH]
            loss = nn.functional.cross_entropy(self.model(self.x.index_select(0, idx)), self.y.index_select(0, idx))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.done += 1
            if self.done % LOG_INTERVAL == 0:
                lr = self.opt.param_groups[0]['lr']
                print(f'step {self.done} loss {self.logged_loss(loss):.4f} lr {lr:.4g}', file=self.log)
            if self.done % spe == 0:
                self.sched.step()
            tick()

    def logged_loss(self, loss):
        """The loss a log line shows: this rank's, or under DDP the mean over the ranks."""
        if self.world == 1:
            return loss.item()
        value = loss.detach().clone()
        dist.all_reduce(value)
        return value.item() / self.world


def main(workload, data, out, steps='0'):
    torch.set_num_threads(1)
    loop = HandLoop(workload, data, int(steps) or None, side_clock(), log=sys.stdout)
    loop.run(loop.total)
    with open(out, 'w') as f:
        json.dump(loop.clock.result(), f)
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
