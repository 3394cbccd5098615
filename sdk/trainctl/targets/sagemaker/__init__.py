"""The sagemaker target: section.py (its knobs), render.py (pure), engine.py (I/O), target.py (the interface)."""
