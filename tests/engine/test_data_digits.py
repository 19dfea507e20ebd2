"""The MNIST CNN task: real images in domain, upsampled scikit-learn digits shifted."""

import numpy as np
import pytest

from calwatch.datasets.digits import digits_task, mnist_5k, sklearn_digits_as_mnist


def test_images_are_in_mnist_format():
    images, labels = mnist_5k()
    assert images.shape == (5000, 28, 28) and set(np.unique(labels)) == set(range(10))
    small, y = sklearn_digits_as_mnist()
    assert small.shape == (1797, 28, 28) and small.min() >= 0 and small.max() <= 255 + 1e-3
    assert np.all(small[:, :4] == 0) and np.all(small[:, :, 24:] == 0)  # the 20x20 box, padded
    assert y.shape == (1797,)


def test_task_splits_accuracies_and_cache():
    task = digits_task()
    assert (task.train.n, task.calibration.n, task.tests["in-distribution"].n) == (2000, 2000, 1000)
    assert task.tests["shifted"].n == 1797 and task.dim == 256
    assert task.calibration.accuracy > 0.99  # the network on real MNIST digits
    assert task.tests["shifted"].accuracy == pytest.approx(0.82, abs=0.03)  # DATA.md: 0.82
    again = digits_task()
    assert np.array_equal(again.calibration.E, task.calibration.E)
