"""Image data written for the tests: PNG class folders, list files and CIFAR-10's python-pickle layout.

Each class has its own colour plus noise, so a model can tell them apart; every file is real
(PNG encoded by Pillow, CIFAR batches pickled with numpy arrays as the original archive holds them).
"""

import os
import pickle

import numpy as np
from PIL import Image


def class_images(labels, size=32, seed=0):
    """uint8 [N, size, size, 3] images: class c is a colour of its own with a bright square and noise."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(30, 220, size=(max(labels) + 1, 3))
    images = np.empty((len(labels), size, size, 3), dtype=np.uint8)
    for i, label in enumerate(labels):
        image = colours[label] + rng.normal(0, 12, size=(size, size, 3))
        top, left = rng.integers(0, size // 2, size=2)
        image[top : top + size // 3, left : left + size // 3] += 60
        images[i] = np.clip(image, 0, 255)
    return images


def write_png_folder(root, classes=3, per_class=4, size=16, seed=0):
    """``root/class_<c>/<i>.png``; returns [(path, label), ...] in the folder dataset's order."""
    labels = [c for c in range(classes) for _ in range(per_class)]
    samples = []
    for i, (image, label) in enumerate(zip(class_images(labels, size, seed), labels)):
        path = os.path.join(root, f'class_{label}', f'{i:03d}.png')
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(image).save(path)
        samples.append((path, label))
    return samples


def write_cifar10(root, per_batch=8, test=10, seed=0):
    """CIFAR-10's python layout under ``root/cifar-10-batches-py``: five training batches, a test batch, the meta."""
    folder = os.path.join(root, 'cifar-10-batches-py')
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']
    for n, name in enumerate(names):
        labels = rng.integers(0, 10, size=test if name == 'test_batch' else per_batch).tolist()
        images = class_images(labels, 32, seed + n)
        entry = {
            'batch_label': name,
            'labels': labels,
            'data': images.transpose(0, 3, 1, 2).reshape(len(labels), -1),  # rows of R, G, B planes
            'filenames': [f'{name}_{i}.png' for i in range(len(labels))],
        }
        with open(os.path.join(folder, name), 'wb') as f:
            pickle.dump(entry, f, protocol=2)
    with open(os.path.join(folder, 'batches.meta'), 'wb') as f:
        pickle.dump({'label_names': [f'class{i}' for i in range(10)], 'num_vis': 3072}, f, protocol=2)
    return root
