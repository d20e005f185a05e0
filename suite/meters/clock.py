"""Step clock: wall time of training steps after warm-up, evaluation and metering kept off the clock."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch

# Dense bf16 peaks of devices we know, for MFU; any other device records mfu = null.
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
}


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, where it is known; None on CPU and unknown GPUs."""
    if device.type != "cuda":
        return None
    return PEAK_FLOPS.get(torch.cuda.get_device_name(device))


class StepClock:
    """Times steps; the first `warmup` timed steps and any step marked off the clock are excluded."""

    def __init__(self, device: torch.device, warmup: int) -> None:
        self.device = device
        self.warmup = warmup
        self.elapsed = 0.0
        self.timed_s = 0.0
        self.timed_steps = 0
        self.timed_tokens = 0
        self.durations: list[float] = []
        self._seen = 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def step(self, tokens: int, on_clock: bool = True):
        """Time one training step of `tokens` tokens (all workers); `on_clock=False` for metered steps."""
        self._sync()
        start = time.perf_counter()
        yield
        self._sync()
        dt = time.perf_counter() - start
        self.elapsed += dt
        self._seen += 1
        if on_clock and self._seen > self.warmup:
            self.timed_s += dt
            self.timed_steps += 1
            self.timed_tokens += tokens
            self.durations.append(dt)

    def tokens_per_s(self) -> float | None:
        return self.timed_tokens / self.timed_s if self.timed_s > 0 else None

    def step_s(self) -> float | None:
        return self.timed_s / self.timed_steps if self.timed_steps else None

    def median_step_s(self) -> float | None:
        """The median timed step: on a shared machine a burst of load slows a few steps, and moves it least."""
        return statistics.median(self.durations) if self.durations else None
