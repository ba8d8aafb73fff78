#!/usr/bin/env python
"""The same workload through mmengine's Runner and PyTorch Lightning's Trainer (``--peers``).

``python benchmarks/peers.py --framework mmengine|lightning --workload mlp --data x.npz --out r.json``

Run by ``overhead.py --peers`` in fresh processes, like the other runners, and timed the
same way (a hook / callback at the end of every train step).  Each is set up as its users
would for this job: mmengine iteration-based with an InfiniteSampler, a LoggerHook every
``log_interval`` steps and a checkpoint at the end; Lightning with checkpointing, logger
and progress bar off.  Neither package is a dependency: install the ``bench`` extra in a
separate environment (``pip install '.[bench]'``) and run ``overhead.py --peers`` there.
"""

import argparse
import importlib.util
import json
import sys
import time

import torch
from hand_loop import build_model, load_tensors
from torch import nn
from workloads import LEARNING_RATE, SEED, plan

PEERS = {'mmengine': 'mmengine', 'lightning': 'lightning'}


def available_peers():
    """(names installed here, {name: why not} for the others)."""
    found, missing = [], {}
    for name, module in PEERS.items():
        if importlib.util.find_spec(module) is None:
            missing[name] = f'module {module!r} is not installed'
        else:
            found.append(name)
    return found, missing


class _Stopwatch:
    """The span between the end of the first and of the last step, as hand_loop.py measures it."""

    def __init__(self):
        self.done, self.first, self.last, self.first_cpu, self.last_cpu, self.first_wall = 0, 0.0, 0.0, 0.0, 0.0, 0.0

    def tick(self):
        now, cpu = time.perf_counter(), time.process_time()
        self.done += 1
        if self.done == 1:
            self.first, self.first_cpu, self.first_wall = now, cpu, time.time()
        self.last, self.last_cpu = now, cpu

    def result(self):
        steps = max(self.done - 1, 1)
        return {
            'steps': self.done,
            'span_s': self.last - self.first,
            'cpu_s': self.last_cpu - self.first_cpu,
            'first_step_wall': self.first_wall,
            'us_per_step': (self.last - self.first) / steps * 1e6,
            'cpu_us_per_step': (self.last_cpu - self.first_cpu) / steps * 1e6,
        }


class _DictDataset(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {'inputs': self.x[i], 'labels': self.y[i]}


def run_mmengine(name, w, epochs, steps, x, y, work_dir, watch):
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Net(BaseModel):
        def __init__(self):
            super().__init__()
            self.net = build_model(name, w)

        def forward(self, inputs, labels, mode='tensor'):
            logits = self.net(inputs)
            return {'loss': nn.functional.cross_entropy(logits, labels)} if mode == 'loss' else logits

    class Timer(Hook):
        priority = 'LOWEST'

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            watch.tick()

    runner = Runner(
        model=Net(),
        work_dir=work_dir,
        train_dataloader={
            'batch_size': w['batch'],
            'num_workers': 0,
            'dataset': _DictDataset(x, y),
            'sampler': {'type': 'InfiniteSampler', 'shuffle': True, 'seed': SEED},
            'collate_fn': {'type': 'default_collate'},
        },
        optim_wrapper={'optimizer': {'type': 'AdamW', 'lr': LEARNING_RATE}},
        param_scheduler={'type': 'CosineAnnealingLR', 'T_max': steps, 'by_epoch': False},
        train_cfg={'by_epoch': False, 'max_iters': steps},
        default_hooks={
            'logger': {'type': 'LoggerHook', 'interval': w['log_interval']},
            'checkpoint': {'type': 'CheckpointHook', 'interval': steps, 'by_epoch': False},
        },
        custom_hooks=[Timer()],
        randomness={'seed': SEED},
        env_cfg={'dist_cfg': {'backend': 'gloo'}},
        default_scope='mmengine',
    )
    runner.train()


def run_lightning(name, w, epochs, steps, x, y, work_dir, watch):
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = build_model(name, w)

        def training_step(self, batch, batch_idx):
            inputs, labels = batch
            loss = nn.functional.cross_entropy(self.net(inputs), labels)
            self.log('loss', loss)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)
            return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)]

    class Timer(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            watch.tick()

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=w['batch'], shuffle=True)
    trainer = pl.Trainer(
        accelerator='cpu',
        devices=1,
        max_epochs=epochs,
        max_steps=steps,
        log_every_n_steps=w['log_interval'],
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=work_dir,
        callbacks=[Timer()],
    )
    trainer.fit(Net(), loader)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--framework', choices=sorted(PEERS), required=True)
    parser.add_argument('--workload', default='mlp')
    parser.add_argument('--data', required=True)
    parser.add_argument('--steps', type=int, default=None)
    parser.add_argument('--out', required=True)
    parser.add_argument('--work-dir', required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    w, epochs, steps = plan(args.workload, args.steps)
    x, y = load_tensors(args.data)
    watch = _Stopwatch()
    run = run_mmengine if args.framework == 'mmengine' else run_lightning
    run(args.workload, w, epochs, steps, x, y, args.work_dir, watch)
    with open(args.out, 'w') as f:
        json.dump(watch.result(), f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
