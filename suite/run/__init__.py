"""Running one configuration: the training loop and its worker, the parallel strategy, the launcher, faults,
checkpoints, limits, protocols, optimizers, and the run record it writes."""
