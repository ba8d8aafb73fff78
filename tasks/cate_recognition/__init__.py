"""Category recognition on scikit-learn's digits (1,797 8x8 images, 10 classes), as arrays or as PNG files."""

from tasks.cate_recognition import digits, digits_images  # noqa: F401  (registers DigitsDataset, DigitsImagesDataset)
