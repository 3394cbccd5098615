"""Run AWS's sagemaker-training toolkit on one fake /opt/ml tree and print what it computes, as JSON.

Run as a script, with the toolkit on PYTHONPATH and SAGEMAKER_BASE_DIR=<root>/opt/ml (the toolkit reads
its paths at import time, so one tree per process). Prints:
- `sm`: `Environment().to_env_vars()`, the SM_* variables a script sees;
- `process`: CURRENT_HOST, SAGEMAKER_REGION, SAGEMAKER_JOB_NAME as `Environment.__init__` sets them;
- `runner`: the torchrun command of `TorchDistributedRunner` (built as `runner.get` builds it for the
  PyTorch container), or "process" where the PyTorch container would run the script once
  (sagemaker_pytorch_container/training.py: the current group is not a distribution group);
- `efa`: the variables `TorchDistributedRunner._setup` sets.
trainctl's launcher always distributes with torchrun, so where the tree carries no distribution
hyperparameter the runner is asked as the SageMaker SDK's `torch_distributed` distribution would
(`sagemaker_torch_distributed_enabled: true`); the SM_* variables come from the tree unchanged.
"""

from __future__ import annotations

import json
import os
import sys

from sagemaker_training import environment, torch_distributed  # type: ignore[import-not-found]

FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
    "sagemaker_distribution_instance_groups",
)


def _torch_runner(env: environment.Environment) -> torch_distributed.TorchDistributedRunner:
    """runner._get_by_runner_type for RunnerType.TorchDistributed, its arguments computed as it does.

    (submit/runner.py itself imports mpi.py, which needs paramiko and gevent, the toolkit's MPI-only dependencies.)
    """
    default = int(env.num_gpus) if int(env.num_gpus) > 0 else int(env.num_neurons) if int(env.num_neurons) > 0 else 1
    processes_per_host = env.additional_framework_parameters.get("sagemaker_mpi_num_of_processes_per_host", default)
    return torch_distributed.TorchDistributedRunner(
        "train.py",
        env.to_cmd_args(),
        env.to_env_vars(),
        processes_per_host,
        env.master_hostname,
        env.distribution_hosts,
        env.current_host,
        env.network_interface_name,
        instance_type=env.current_instance_type,
    )


def main() -> None:
    env = environment.Environment()
    sm = env.to_env_vars()
    process = {k: os.environ.get(k) for k in ("CURRENT_HOST", "SAGEMAKER_REGION", "SAGEMAKER_JOB_NAME")}
    read = environment.read_hyperparameters
    if not any(k in read() for k in FLAGS):
        environment.read_hyperparameters = lambda: {**read(), "sagemaker_torch_distributed_enabled": True}
    dist_env = environment.Environment()
    result: dict[str, object] = {"sm": sm, "process": process, "master": dist_env.master_hostname}
    if dist_env.current_instance_group in dist_env.distribution_instance_groups:
        torch_runner = _torch_runner(dist_env)
        set_before = dict(os.environ)
        result["runner"] = torch_runner._create_command()
        result["efa"] = {k: v for k, v in os.environ.items() if set_before.get(k) != v}
    else:
        result["runner"] = "process"
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
