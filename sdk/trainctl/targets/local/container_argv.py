"""`local.container: podman | docker` (pure): the job's image run on this machine, one container.

The same launcher and trainer flags as the process run, but inside the image, as the image's user
10001 with a read-only root filesystem: each data path is bind-mounted read-only at
`/data/<name>`, the output and checkpoint folders read-write at `/workspace/output` and
`/workspace/checkpoints`, the run's work/ folder read-write at `/workspace/work` (the working directory),
with `s3://` inputs the container's own data cache read-write at `/workspace/data-cache`;
with `code:` the run's bundle read-only at `/workspace/code.tar.gz` and the
run's `code/` folder read-write at `/workspace/code` (the launcher unpacks into `src/` and keeps the
requirements' venvs in `venvs/` there: the root is read-only), the job's environment passed by name (`-e NAME`, values from the runner's
environment, so secret values never appear in an argv; a job that reads or writes S3 also gets the AWS
variables, `AWS_ENV`), host networking (the rendezvous is localhost; an S3 endpoint on this machine is
reachable), and `--pull never` (the image must be on this machine: scripts/image.sh builds it).
The engine creates the container at submit (so a missing image or a bad mount fails there, with
the runtime's words, before anything is recorded) and the runner starts it attached.
"""

from __future__ import annotations

from typing import Any

TRAINER_USER = "10001:10001"
"""The image's user (Dockerfile `USER`); the run's output folders are given to it."""
DATA_ROOT = "/data"
OUTPUT_DIR = "/workspace/output"
CHECKPOINT_DIR = "/workspace/checkpoints"
CODE_BUNDLE = "/workspace/code.tar.gz"
WORK_DIR = "/workspace/work"
"""The container's working folder: the run's work/ (or local.workdir), read-write."""
CODE_WORK = "/workspace/code"
"""A `code:` job's writable folder in the container (the host's `<run dir>/code`, given to 10001)."""
CODE_DIR = f"{CODE_WORK}/src"
VENV_CACHE = f"{CODE_WORK}/venvs"
"""Per run: a venv is built on the image's own interpreter and pins, so it is not shared with the host's."""
DATA_CACHE = "/workspace/data-cache"
"""Where the launcher stages `s3://` inputs in the container (the host's `$TRAINCTL_HOME/data-cache-container`)."""
AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)
"""What an S3 job's container gets of the runner's AWS settings, by name (`--env NAME` passes nothing for a name
the runner has not set): the keys botocore's EnvProvider reads, the ECS/EKS-Pod-Identity ContainerProvider's
variables (botocore/credentials.py), the region and the endpoint (botocore/configprovider.py). A profile in
~/.aws is not there: the files are not mounted (tests/local/test_local_render.py checks these names against
botocore's own)."""
RUN_ID = "${TRAINCTL_RUN_ID}"
"""The run's id, known when the engine starts it; the container is named `trainctl-<run id>`."""
SHM_SIZE = "1g"


def container_name(run_id: str) -> str:
    return f"trainctl-{run_id}"


def data_mounts(data_paths: dict[str, str], trainer_paths: dict[str, str]) -> dict[str, str]:
    """Host path -> container path for every input on this machine (job.data by name, trainer.*_data by field);
    an `s3://` input is no mount: the launcher in the container stages or streams it."""
    mounts = {host: f"{DATA_ROOT}/{name}" for name, host in sorted(data_paths.items()) if not host.startswith("s3://")}
    for field, host in sorted(trainer_paths.items()):
        mounts.setdefault(host, f"{DATA_ROOT}/trainer-{field}")
    return mounts


def run_argv(
    runtime: str,
    image: str,
    *,
    mounts_ro: dict[str, str],
    mounts_rw: list[tuple[str, str]],
    env_names: list[str],
    launcher_argv: list[str],
) -> list[str]:
    """`podman|docker run ...` for the job: what the rendered script shows and the engine creates."""
    argv = [runtime, "run", "--name", container_name(RUN_ID), "--label", f"io.trainctl.run={RUN_ID}"]
    argv += ["--user", TRAINER_USER, "--read-only", "--network", "host", "--shm-size", SHM_SIZE, "--pull", "never"]
    # podman gives a --read-only container a writable /tmp by itself, Docker does not: torchrun and pip need one
    argv += ["--tmpfs", "/tmp:rw,mode=1777", "--workdir", WORK_DIR]
    for host, inside in mounts_ro.items():
        argv += ["--volume", f"{host}:{inside}:ro"]
    for host, inside in mounts_rw:
        argv += ["--volume", f"{host}:{inside}"]
    for name in env_names:
        argv += ["--env", name]
    return [*argv, image, *launcher_argv]


def split_run(argv: list[str]) -> dict[str, Any]:
    """The engine's view of a rendered `run` argv: the create argv and the container's name."""
    assert argv[1] == "run", argv
    name = argv[argv.index("--name") + 1]
    return {"runtime": argv[0], "create": [argv[0], "create", *argv[2:]], "name": name}
