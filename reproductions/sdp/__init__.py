"""Subnetwork Data Parallelism; importing this package registers b-sdp and bb-sdp."""

from reproductions.sdp import method  # noqa: F401  (registration)
