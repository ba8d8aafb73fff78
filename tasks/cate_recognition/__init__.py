"""Category recognition on scikit-learn's digits (1,797 8x8 images, 10 classes)."""

from tasks.cate_recognition import digits  # noqa: F401  (registers DigitsDataset)
