"""Subnetwork Data Parallelism; importing this package registers b-sdp, bb-sdp (method.py) and n-sdp (neurons.py)."""

from reproductions.sdp import method, neurons  # noqa: F401  (registration)
