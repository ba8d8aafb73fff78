#!/usr/bin/env python
"""The Lightning baseline: the workload as a Lightning user writes it, nothing of the toolkit.

``python benchmarks/plain_lightning.py [--manual] WORKLOAD DATA.npz OUT.json [STEPS]`` (``common.launch``
runs it) writes its StepClock result.

A plain LightningModule with automatic optimization: ``training_step`` returns the loss and
prints it every LOG_INTERVAL steps (as hand_loop does; ``self.log`` at every step would make this
baseline several times slower on the MLP), ``configure_optimizers`` gives AdamW with a per-epoch
cosine schedule.  The
model and the batches are ``hand_loop``'s (the data in tensors, a seeded per-epoch
permutation, ``index_select``), and the Trainer gets the settings ``ENV.USE_PL`` runs with
(no logger, checkpointing, progress bar or model summary; no sanity validation).  The clock
ticks in ``on_train_batch_end``, after the optimizer step.

``--manual``: the leanest module Lightning allows, manual optimization (``zero_grad``,
``manual_backward``, ``step`` in ``training_step``; the scheduler stepped at each epoch's end),
which is Lightning's loop as ``ENV.USE_PL`` drives it, minus the solver.
"""

import json
import sys

import lightning.pytorch as pl
import numpy as np
import torch
from common import BATCH, LEARNING_RATE, LOG_INTERVAL, SEED, plan, side_clock
from hand_loop import build_model
from torch import nn


class EpochBatches:
    """The workload's batches of one pass: a seeded permutation per epoch, as hand_loop takes them."""

    def __init__(self, x, y, steps_per_epoch):
        self.x, self.y, self.steps, self.epoch = x, y, steps_per_epoch, 0

    def __len__(self):
        return self.steps

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(SEED + self.epoch)
        self.epoch += 1
        perm = torch.randperm(len(self.x), generator=g)
        for i in range(self.steps):
            idx = perm[i * BATCH : (i + 1) * BATCH]
            yield self.x.index_select(0, idx), self.y.index_select(0, idx)


class PlainModule(pl.LightningModule):
    def __init__(self, model, epochs, clock, manual):
        super().__init__()
        self.model, self.epochs, self.clock = model, epochs, clock
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.model(x), y)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            opt.step()
        if (self.global_step + 1) % LOG_INTERVAL == 0:  # hand_loop's line (self.log every step costs far more)
            print(f'step {self.global_step + 1} loss {loss.item():.4f}', file=sys.stderr)
        return loss

    def on_train_epoch_end(self):
        if not self.automatic_optimization:
            self.lr_schedulers().step()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.clock.tick()

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)
        return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.epochs)]


def train_plain(workload, data, steps, manual, clock):
    """One run of the plain module (``steps`` None: the workload's), ticking ``clock`` after every step."""
    w, epochs, _ = plan(workload, steps)
    with np.load(data) as arrays:
        x, y = torch.as_tensor(arrays['x']), torch.as_tensor(arrays['y'])
    torch.manual_seed(SEED)
    module = PlainModule(build_model(workload, w), epochs, clock, manual)
    trainer = pl.Trainer(
        accelerator='cpu',
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=EpochBatches(x, y, w['steps_per_epoch']))


def main(*args):
    manual = args[0] == '--manual'
    workload, data, out, steps = (*args[manual:], '0')[:4]
    torch.set_num_threads(1)
    clock = side_clock()
    train_plain(workload, data, int(steps) or None, manual, clock)
    with open(out, 'w') as f:
        json.dump(clock.result(), f)
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
