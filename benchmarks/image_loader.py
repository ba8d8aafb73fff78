#!/usr/bin/env python
"""The loader with scepter's image pipeline against a hand-written Pillow + numpy Dataset in a plain DataLoader.

``python benchmarks/image_loader.py [--images 4096] [--size 32] [--rounds 7] [--workers 2] [--json FILE]``

Both sides read the same PNG files (class folders written once into a temporary folder,
``--size`` square, colour fields with noise) and do the same work per sample: decode with
Pillow, a random resized crop (area 0.8-1.0, aspect 3/4-4/3) back to ``--size``, a random
horizontal flip, float32 C x H x W in [0, 1], per-channel normalisation; batches of 64,
shuffled, ``--workers`` worker processes.

- toolkit: ``ImageFolderDataset`` with scepter's ``TRANSFORMS`` (RandomResizedCrop,
  RandomHorizontalFlip, ImageToTensor, Normalize, Select) through ``build_data``, the
  solver's own loader (sampler, per-sample generators, ``DictCollate``), a pass being
  ``set_epoch(p)`` then ``iterate()``;
- hand: a ``torch.utils.data.Dataset`` whose ``__getitem__`` does the work with Pillow,
  numpy and ``random``, in ``DataLoader(shuffle=True)``.

Each round times one whole pass of each (from creating the iterator, so worker start-up
counts on both sides, to the last batch), the order alternating between rounds. Printed:
batches per second of each side per round and the median over rounds of the ratio
toolkit / hand (the target: at least 0.9).  On a shared machine one pass runs tens of
percent faster or slower than the next, so two figures that other processes do not move
come with it: the CPU seconds the workers spent on a pass (they exit at its end; read
from ``getrusage(RUSAGE_CHILDREN)``), as batches per CPU second, and the CPU time of one
item of each dataset in this process (``time.thread_time``, the two sides taking turns
item by item, which goes first alternating).
"""

import argparse
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from scepter_like.config import Config  # noqa: E402
from scepter_like.data.loader import build_data  # noqa: E402
from scepter_like.utils.distributed import DistInfo  # noqa: E402

BATCH, CLASSES, SEED = 64, 10, 0
SCALE, RATIO = (0.8, 1.0), (3 / 4, 4 / 3)
MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010]


def write_images(folder, count, size):
    """``count`` PNGs of ``size`` x ``size`` in CLASSES class folders: a colour per class, noise and a square."""
    rng = np.random.default_rng(SEED)
    colours = rng.integers(30, 220, size=(CLASSES, 3))
    for i in range(count):
        label = i % CLASSES
        image = colours[label] + rng.normal(0, 12, size=(size, size, 3))
        top, left = rng.integers(0, size // 2, size=2)
        image[top : top + size // 3, left : left + size // 3] += 60
        path = os.path.join(folder, f'class_{label}', f'{i:05d}.png')
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(path)


class HandDataset(torch.utils.data.Dataset):
    """What a user writes by hand: decode, crop, flip, normalise with Pillow, numpy and ``random``."""

    def __init__(self, folder, size):
        classes = sorted(os.listdir(folder))
        self.samples = [
            (os.path.join(folder, name, f), label)
            for label, name in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(folder, name)))
        ]
        self.size = size
        self.mean = np.asarray(MEAN, dtype=np.float32)
        self.std = np.asarray(STD, dtype=np.float32)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        with Image.open(path) as f:
            img = f.convert('RGB')
        width, height = img.size
        area = width * height * random.uniform(*SCALE)
        aspect = math.exp(random.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w = min(width, round(math.sqrt(area * aspect)))
        h = min(height, round(math.sqrt(area / aspect)))
        top, left = random.randint(0, height - h), random.randint(0, width - w)
        img = img.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.Resampling.BILINEAR)
        if random.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = (np.asarray(img, dtype=np.float32) / 255 - self.mean) / self.std
        return torch.from_numpy(x.transpose(2, 0, 1).copy()), label


def toolkit_loader(folder, size, workers):
    """The solver's DataBundle of the scepter pipeline on ``folder``."""
    transforms = [
        {'NAME': 'RandomResizedCrop', 'SIZE': size, 'SCALE': list(SCALE), 'RATIO': list(RATIO)},
        {'NAME': 'RandomHorizontalFlip', 'P': 0.5},
        {'NAME': 'ImageToTensor'},
        {'NAME': 'Normalize', 'MEAN': MEAN, 'STD': STD},
        {'NAME': 'Select', 'KEYS': ['img', 'label']},
    ]
    data = {'NAME': 'ImageFolderDataset', 'DATA_ROOT': folder, 'BATCH_SIZE': BATCH, 'NUM_WORKERS': workers}
    cfg = Config({'TRAIN_DATA': dict(data, TRANSFORMS=transforms)}).TRAIN_DATA
    return build_data(cfg, 'train', DistInfo(), SEED)


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_pass(batches):
    """(wall seconds, CPU seconds of the exited workers, batches) of one whole pass over ``batches()``."""
    start, cpu = time.perf_counter(), children_cpu()
    count, last = 0, None
    for batch in batches():
        count, last = count + 1, batch
    seconds = time.perf_counter() - start
    image = last['img'] if isinstance(last, dict) else last[0]
    assert image.dtype == torch.float32 and image.dim() == 4, image.shape
    return seconds, children_cpu() - cpu, count


def per_sample_cpu_us(toolkit, hand, passes=3):
    """Mean CPU µs of one item of each dataset, taken in turns in this process (the order alternating)."""
    times = {'toolkit': [], 'hand': []}
    sides = (('toolkit', toolkit.dataset.__getitem__), ('hand', hand.__getitem__))
    for p in range(passes):
        toolkit.set_epoch(p)
        for index in range(len(hand)):
            for name, get in sides if (index + p) % 2 else sides[::-1]:
                start = time.thread_time()
                get(index)
                times[name].append(time.thread_time() - start)
    return {name: statistics.mean(t) * 1e6 for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=4096)
    parser.add_argument('--size', type=int, default=32, help='image side, before and after the crop')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--json', help='write the figures here too')
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix='scepter_bench_images_') as folder:
        write_images(folder, args.images, args.size)
        toolkit = toolkit_loader(folder, args.size, args.workers)
        hand = torch.utils.data.DataLoader(
            HandDataset(folder, args.size), batch_size=BATCH, shuffle=True, num_workers=args.workers
        )

        def toolkit_pass(pass_index):
            toolkit.set_epoch(pass_index)
            return toolkit.iterate

        sides = {'toolkit': toolkit_pass, 'hand': lambda _: hand.__iter__}
        rates = {'toolkit': [], 'hand': []}
        cpu_rates = {'toolkit': [], 'hand': []}
        timed_pass(sides['toolkit'](0)), timed_pass(sides['hand'](0))  # warm the page cache and imports
        for r in range(args.rounds):
            for name in ('toolkit', 'hand') if r % 2 == 0 else ('hand', 'toolkit'):
                seconds, cpu, count = timed_pass(sides[name](r + 1))
                rates[name].append(count / seconds)
                cpu_rates[name].append(count / cpu)
            print(
                f'round {r + 1}: toolkit {rates["toolkit"][-1]:.1f} batches/s, hand {rates["hand"][-1]:.1f} batches/s,'
                f' ratio {rates["toolkit"][-1] / rates["hand"][-1]:.3f}; per worker CPU second: toolkit'
                f' {cpu_rates["toolkit"][-1]:.1f}, hand {cpu_rates["hand"][-1]:.1f} batches',
                flush=True,
            )
        sample_us = per_sample_cpu_us(toolkit, hand.dataset)
    ratios = [t / h for t, h in zip(rates['toolkit'], rates['hand'])]
    cpu_ratios = [t / h for t, h in zip(cpu_rates['toolkit'], cpu_rates['hand'])]
    result = {
        'images': args.images,
        'size': args.size,
        'workers': args.workers,
        'batches_per_s': {name: statistics.median(r) for name, r in rates.items()},
        'ratio_median': statistics.median(ratios),
        'ratio_range': [min(ratios), max(ratios)],
        'batches_per_worker_cpu_s': {name: statistics.median(r) for name, r in cpu_rates.items()},
        'cpu_ratio_median': statistics.median(cpu_ratios),
        'cpu_ratio_range': [min(cpu_ratios), max(cpu_ratios)],
        'per_sample_cpu_us': sample_us,
        'per_sample_ratio_hand_over_toolkit': sample_us['hand'] / sample_us['toolkit'],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=2)


if __name__ == '__main__':
    main()
