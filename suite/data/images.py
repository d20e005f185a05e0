"""Labelled 32x32 images with seeded, rank-splittable batches, and the embedded default set.

The embedded set is scikit-learn's digits (1,797 real 8x8 handwritten digits, 10 classes, shipped
inside the package), upsampled to 32x32 and replicated to 3 channels so that CIFAR models run on it
unchanged. Images are kept as uint8 and normalised per batch, so CIFAR's 50,000 training images stay
at 150 MB per worker instead of 600 MB of floats.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from suite.data.sampling import rows, step_generator

SIZE = 32
CHANNELS = 3
VAL_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass
class ImageData:
    """Train and val uint8 images [N, C, 32, 32] with int labels; normalised with train statistics."""

    name: str
    source: str
    split_rule: str
    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor
    num_classes: int
    mean: torch.Tensor = field(init=False)
    std: torch.Tensor = field(init=False)
    kind: str = field(default="image", init=False)

    def __post_init__(self) -> None:
        pixels = self.train_images.transpose(0, 1).reshape(self.in_channels, -1).double() / 255
        self.mean, self.std = pixels.mean(1).float(), pixels.std(1).float()

    @property
    def in_channels(self) -> int:
        return self.train_images.shape[1]

    def batch(
        self, step: int, global_batch: int, seed: int, start: int = 0, count: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows start..start+count of step `step`'s global batch: float images [count, C, 32, 32] and labels.

        The global batch is drawn with replacement from the train split by a generator seeded from
        (seed, step), whole on every rank and then sliced, so it does not depend on the split among ranks.
        """
        picked = rows(global_batch, start, count)
        index = torch.randint(0, len(self.train_labels), (global_batch,), generator=step_generator(seed, step))
        return self._normalised(self.train_images, self.train_labels, index[picked])

    def val_batches(self, n_batches: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first n_batches * batch val images in stored order."""
        if n_batches < 1 or batch < 1 or n_batches * batch > len(self.val_labels):
            raise ValueError(
                f"{n_batches} val batches of {batch} need 1 <= n_batches * batch <= "
                f"{len(self.val_labels)} (the val split of {self.name})"
            )
        index = torch.arange(n_batches * batch).view(n_batches, batch)
        return [self._normalised(self.val_images, self.val_labels, i) for i in index]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "n_train": len(self.train_labels),
            "n_val": len(self.val_labels),
            "num_classes": self.num_classes,
            "shape": list(self.train_images.shape[1:]),
            "split": self.split_rule,
            "normalisation": {"mean": self.mean.tolist(), "std": self.std.tolist(), "from": "train split"},
            "augmentation": "none",
            "sampling": "each step: global_batch train images drawn uniformly with replacement, "
            "torch.Generator seeded from (seed, step); ranks take consecutive rows",
        }

    def _normalised(
        self, images: torch.Tensor, labels: torch.Tensor, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = images[index].float().div_(255)
        return (x - self.mean[:, None, None]) / self.std[:, None, None], labels[index].long()


def embedded_images() -> ImageData:
    """scikit-learn's digits at 32x32 with 3 identical channels; stratified 80/20 split, fixed seed."""
    import sklearn  # here, not at the top: importing ImageData should not cost a scikit-learn import
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    small = torch.from_numpy(digits.images).float().div(16).unsqueeze(1)
    big = F.interpolate(small, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    images = big.mul(255).round().clamp(0, 255).to(torch.uint8).expand(-1, CHANNELS, -1, -1)
    labels = torch.from_numpy(digits.target)
    train, val = train_test_split(
        np.arange(len(labels)), test_size=VAL_FRACTION, stratify=digits.target, random_state=SPLIT_SEED
    )
    return ImageData(
        name="digits",
        source=f"scikit-learn {sklearn.__version__} load_digits ({len(labels)} 8x8 images, embedded), "
        f"bilinear to {SIZE}x{SIZE}, grey replicated to {CHANNELS} channels, uint8",
        split_rule=f"stratified by class, {VAL_FRACTION:.0%} val, sklearn train_test_split random_state={SPLIT_SEED}",
        train_images=images[train],
        train_labels=labels[train],
        val_images=images[val],
        val_labels=labels[val],
        num_classes=len(digits.target_names),
    )
