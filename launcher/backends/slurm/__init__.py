"""SLURM clusters, reached through their login node."""
