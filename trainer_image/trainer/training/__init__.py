"""The training loop and what runs inside it (trainer/train.py is its entry): steps, evaluation, metrics,
precision, the hang watchdog, stragglers and the roll call, the final model."""
