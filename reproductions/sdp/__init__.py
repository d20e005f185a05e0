"""Subnetwork Data Parallelism; importing this package registers b-sdp (compose.py), bb-sdp (method.py) and
n-sdp (neurons.py)."""

from reproductions.sdp import compose, method, neurons  # noqa: F401  (registration)
