"""The Docker backend: images, the run's simulated internet (its own, or a shared hub's), the next session's replay."""
