"""Running many configurations: a reproduction's plan and presets, the local and SLURM launchers of a plan,
several runs in one launch, microbenchmarks, throughput pairs, and the results folder's lock."""
