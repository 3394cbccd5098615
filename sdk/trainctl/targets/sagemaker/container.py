"""Which program the image starts, and so how the request drives it. Pure.

- `trainctl`: trainctl's trainer image. `ContainerEntrypoint ["train"]` runs its `train` script
  (`exec trainer-launch`), which reads the program from the hyperparameters (docs/contracts.md section 1).
- `toolkit`: an image whose entry point is AWS's sagemaker-training toolkit, such as AWS's PyTorch
  Deep Learning Containers. Driven exactly as the SageMaker Python SDK drives them: no
  ContainerEntrypoint/ContainerArguments (so the image's own ENTRYPOINT runs: the DLC's
  `bash -m start_with_right_hostname.sh train`, which fixes the hostname MPI/smddp need and starts
  the toolkit's `train`; aws/deep-learning-containers pytorch/training/docker/*/Dockerfile.gpu,
  aws/sagemaker-pytorch-training-toolkit docker/build_artifacts/start_with_right_hostname.sh), and the
  hyperparameters the toolkit reads (sagemaker_training/params.py, read in environment.py
  `Environment.__init__`): `sagemaker_program` (the script; without it the toolkit stops with "The
  training entry point name is empty"), `sagemaker_submit_directory` (the S3 tarball it downloads,
  files.py `download_and_extract`), `sagemaker_region`, `sagemaker_container_log_level` and
  `sagemaker_job_name`, which SDK 2.x sets the same way (sagemaker/estimator.py
  `Framework._prepare_for_training`'s hyperparameters).
"""

from __future__ import annotations

import re
from typing import Literal

from ...spec.job_spec import JobSpec
from .section import SageMakerSection

Container = Literal["trainctl", "toolkit"]
# AWS's PyTorch training images (plain and Hugging Face): the toolkit is their entry point.
AWS_PYTORCH_TRAINING = re.compile(
    r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(huggingface-)?pytorch-training[:@]"
)
_ECR_REGION = re.compile(r"^\d{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com")

REGION_KEY = "sagemaker_region"
LOG_LEVEL_KEY = "sagemaker_container_log_level"
JOB_NAME_KEY = "sagemaker_job_name"
PROCESSES_PER_HOST_KEY = "sagemaker_mpi_num_of_processes_per_host"  # submit/runner.py: processes per host
DISTRIBUTION_GROUPS_KEY = "sagemaker_distribution_instance_groups"  # environment.py: the groups that train


def container(job: JobSpec) -> Container:
    """The job's `sagemaker.container`, with `auto` resolved from the image name."""
    chosen = job.section_as("sagemaker", SageMakerSection).container
    if chosen == "trainctl":
        return "trainctl"
    if chosen == "toolkit":
        return "toolkit"
    return "toolkit" if AWS_PYTORCH_TRAINING.match(job.image) else "trainctl"


def image_region(image: str) -> str | None:
    """The region in an ECR image URI (a training job pulls from its own region's ECR)."""
    found = _ECR_REGION.match(image)
    return found.group(1) if found else None


def toolkit_problems(job: JobSpec) -> list[str]:
    """What a toolkit image cannot run, said before anything is sent."""
    problems: list[str] = []
    why = f"image {job.image!r} starts AWS's sagemaker-training toolkit, which runs a script from sagemaker.source_dir"
    if job.trainer is not None:
        problems.append(
            f"trainer: the built-in trainer lives in trainctl's trainer image; {why}. Use trainctl's image "
            "(or sagemaker.container: trainctl for an image built FROM it), or a command job with source_dir"
        )
    elif job.section_as("sagemaker", SageMakerSection).source_dir is None and job.code is None:
        problems.append(
            f"sagemaker.source_dir: required: {why}; set it to the folder with the command's script "
            "(the command must be [python, SCRIPT, --key, value, ...])"
        )
    if job.secrets:
        problems.append(
            "secrets: trainctl's launcher reads them at run time and a toolkit image has no launcher; "
            "use trainctl's image, or read them in your script"
        )
    if job.resources.max_restarts:
        problems.append(
            "resources.max_restarts: the toolkit starts torchrun without restarts; set 0 or use trainctl's image"
        )
    if job.resources.elastic is not None:
        problems.append("resources.elastic: not with a toolkit image (nor on SageMaker at all)")
    if job.launch == "per_node":
        problems.append(
            "launch: per_node: the toolkit runs the script itself (its own torchrun); trainctl's launcher, which "
            "starts your command once per node, is in trainctl's image: use it, or remove launch: per_node"
        )
    if job.hang is not None:
        problems.append(
            "hang: trainctl's launcher watches the workers' output and a toolkit image has no launcher; "
            "use trainctl's image"
        )
    return problems
