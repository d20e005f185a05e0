"""Data for the training loop: a registry of named sets, embedded defaults that need no download, and
loaders for the real sets. Every set gives seeded batches that any rank can slice on its own."""

import importlib

from suite.data.images import ImageData
from suite.data.text import TokenData

Data = TokenData | ImageData

# the standard library's areas, each a set of its own (suite/data/stdlib.py AREAS; literal here so that listing
# the sets imports no loader)
STDLIB_AREAS = ("text", "net", "concurrency", "gui", "rest")
# name -> (module, loader, fixed options, embedded). An embedded set takes no data root; the others get it.
# Loader modules are imported on first use: datasets, torchvision and scikit-learn together add
# seconds to the start of every worker that would never read them.
_LOADERS: dict[str, tuple[str, str, dict, bool]] = {
    "text": ("suite.data.text", "embedded_text", {}, True),
    "stdlib": ("suite.data.stdlib", "stdlib_text", {}, True),
    **{f"stdlib-{a}": ("suite.data.stdlib", "stdlib_area", {"area": a}, True) for a in STDLIB_AREAS},
    "digits": ("suite.data.images", "embedded_images", {}, True),
    "fineweb": ("suite.data.fineweb", "fineweb_text", {"name": "fineweb"}, False),
    "fineweb-edu": ("suite.data.fineweb", "fineweb_text", {"name": "fineweb-edu"}, False),
    "cifar10": ("suite.data.cifar", "cifar", {"name": "cifar10"}, False),
    "cifar100": ("suite.data.cifar", "cifar", {"name": "cifar100"}, False),
}
NAMES = sorted(_LOADERS)
EMBEDDED = sorted(name for name, (*_, embedded) in _LOADERS.items() if embedded)
DEFAULTS = {"lm": "text", "image": "digits"}


def load_data(name: str, data_root: str | None = None, **kw) -> Data:
    """The data set called `name`; data_root and kw go to the loaders of sets that live on disk or the Hub."""
    if name not in _LOADERS:
        raise ValueError(f"unknown data set {name!r}: use one of {', '.join(NAMES)}")
    module, loader, fixed, embedded = _LOADERS[name]
    load = getattr(importlib.import_module(module), loader)
    if embedded:
        if data_root is not None or kw:
            raise ValueError(f"{name!r} is embedded and takes no data root or options; drop --data-root")
        return load(**fixed)
    return load(data_root, **fixed, **kw)


def epochs_seen(consumed: int, described: dict) -> float | None:
    """How many times a run read its training split over: tokens (images for image data) consumed over the
    split's size, from the record's `data` section. Windows start at random offsets, so this is the mean number
    of times a training token was read, not a count of passes; None when the section gives no size."""
    size = described.get("n_train_tokens", described.get("n_train"))
    return consumed / size if size else None


def default_data_for(kind: str) -> str:
    """The embedded set a model of this kind trains on when no data is named ('lm' or 'image')."""
    if kind not in DEFAULTS:
        raise ValueError(f"unknown model kind {kind!r}: use one of {', '.join(DEFAULTS)}")
    return DEFAULTS[kind]


__all__ = ["EMBEDDED", "NAMES", "Data", "ImageData", "TokenData", "default_data_for", "epochs_seen", "load_data"]
