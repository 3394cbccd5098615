"""Small, offline example data for the built-in models."""
