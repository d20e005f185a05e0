"""Matched baselines, applied from outside the model; the `baselines` reproduction declares them to the suite."""
