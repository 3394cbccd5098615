"""Checkpoints: the checkpointer over the run's stateful parts, its files and their checks, the
background writer, uploads to S3, and the RNG states that make a resume bit-identical."""
