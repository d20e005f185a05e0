"""CIFAR-10 and CIFAR-100 through torchvision, as ImageData (no augmentation: not needed by the
current reproductions, which compare methods on the same data rather than chase accuracy)."""

from pathlib import Path

import torch
import torchvision

from suite.data.images import ImageData

DATASETS = {"cifar10": torchvision.datasets.CIFAR10, "cifar100": torchvision.datasets.CIFAR100}


def cifar(data_root: str | None, name: str = "cifar10") -> ImageData:
    """The train split for training, the test split for validation; normalised with train statistics."""
    if name not in DATASETS:
        raise ValueError(f"unknown CIFAR variant {name!r}: use one of {sorted(DATASETS)}")
    cls = DATASETS[name]
    how = (
        f"get it with `python -c \"import torchvision; torchvision.datasets.{cls.__name__}('ROOT', "
        f'download=True)"` on a machine with network, then pass --data-root ROOT'
    )
    if data_root is None or not Path(data_root).is_dir():
        raise FileNotFoundError(f"{name} needs a data root folder (got {data_root}): {how}")
    try:
        train, test = (cls(data_root, train=t, download=False) for t in (True, False))
    except RuntimeError as e:  # torchvision's "not found or corrupted"
        raise FileNotFoundError(f"{name} under {data_root}: {e}; {how}") from e
    return ImageData(
        name=name,
        source=f"torchvision.datasets.{cls.__name__} at {data_root}",
        split_rule=f"train = the {len(train)} training images, val = the {len(test)} test images",
        train_images=_chw(train),
        train_labels=torch.tensor(train.targets),
        val_images=_chw(test),
        val_labels=torch.tensor(test.targets),
        num_classes=len(train.classes),
    )


def _chw(ds: torchvision.datasets.CIFAR10) -> torch.Tensor:
    return torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
