"""Loads: restore targets, and loading named checkpointables into them from complete checkpoints."""
