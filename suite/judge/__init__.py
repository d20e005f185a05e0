"""Judging claims: the claim cards, the metrics that turn records into samples, targets, sweeps, the paper's
regime, and the verdicts."""
