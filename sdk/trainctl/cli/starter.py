"""The commented starter job file `trainctl init` writes (tests/sdk/test_cli.py checks it validates).

Its conventions, which the tests hold it to: a line `# key: value` (one space after `#`) is an optional setting
that still validates when uncommented in place (all of them at once); your own program's lines (`code:`,
`command:`) are indented under their comment, as the alternative to `trainer:`; and no comment shares a line with
the name, so a long name never pushes the comments out of line.
"""

from __future__ import annotations

STARTER = """\
# A trainctl job: defined once, run on any target. Check it as submit would (errors name the field),
# show exactly what would run, then run it here and stream the log:
#   trainctl validate {filename}
#   trainctl render {filename} --target local
#   trainctl submit {filename} --target local --wait
# Reference: docs/job-reference.md, or `trainctl schema` for the JSON Schema.

# At most 63 lowercase letters, digits and '-'; it starts with a letter.
name: {name}

# What runs: the built-in trainer (below) OR your own program under the launcher. For your own
# program, replace `trainer:` with your code folder (shipped as a verified bundle beside the image,
# no image build) and the command to run in it on every process (docs/your-program.md):
#   code: ./src
#   command: [python, train.py, --epochs, "3"]
trainer:
  model: digits             # built-in ("digits", "mlp-regression") or "package.module:build_fn"
  batch_size: 32            # per process
  epochs: 3
  lr: 0.001
  # precision: bf16         # fp32 | bf16 | fp16 (fp16 needs GPUs)
  # strategy: ddp           # ddp | fsdp

resources:
  nodes: 1
  procs_per_node: 2         # default: gpus_per_node, or 1 on CPU
  gpus_per_node: 0          # > 0 means NCCL; 0 means gloo on CPU
  # memory: 16Gi            # per node
  # max_restarts: 0         # torchrun restarts of the worker group

# Named inputs: local paths (relative to this file), s3:// URIs or pvc:// paths; validate checks that
# local ones exist. Your own program: point them at your files, or delete `data:`.
# Make the demo data with: python -m trainer.examples.digits_data data/digits
data:
  train: data/digits/train.jsonl
  val: data/digits/val.jsonl

checkpoint:
  every_steps: 100
  keep: 3
  # dir: /shared/checkpoints          # default: the target's own location

# env: {{LOG_LEVEL: info, SEED: 3}}    # text; a number becomes its text, quote a boolean: 'true'
# secrets: [{{env: WANDB_API_KEY, name: wandb-api-key}}]   # only names are written down; resolved on the target
max_runtime: 1h             # "90m", "4h", "1d2h30m", "HH:MM:SS" or seconds

# One optional section per target, for knobs only that target has:
# local: {{python: /usr/bin/python3}}
# slurm: {{partition: gpu, account: my-project}}
# kubernetes: {{namespace: ml, kueue_queue: team-a}}
# sagemaker: {{role_arn: "arn:aws:iam::123456789012:role/SageMaker", instance_type: ml.g5.12xlarge}}
"""


def starter(name: str, filename: str) -> str:
    return STARTER.format(name=name, filename=filename)
