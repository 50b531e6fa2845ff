"""The run service: what `sandbox-lab serve` and its workers run, over the same backends as the command line."""
