"""Matched baselines, applied from outside the model; importing this package registers them."""

from baselines import ddp, fsdp  # noqa: F401  (registration)
