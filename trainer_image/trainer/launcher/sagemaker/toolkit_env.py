"""SageMaker's training environment exactly as the `sagemaker-training` toolkit computes it (a port).

AWS's containers run the toolkit, which exports `SM_HOSTS`, `SM_CURRENT_HOST`, `SM_CHANNEL_<NAME>`,
`SM_MODEL_DIR`, `SM_HPS`, ... to the user's script; trainctl's image has no toolkit, so the launcher
computes the same values and a script written for SageMaker runs unchanged. Pure: the host facts
that the toolkit probes (GPUs, CPUs, Neuron cores, smddprun) come in as `HostFacts`.

Ported from aws/sagemaker-training-toolkit 5.1.4 (src/sagemaker_training/; the version the oracle test runs):
- environment.py `Environment.__init__`, its properties, `to_env_vars`, `get_distribution_*`,
  `get_master_hostname`, `read_hyperparameters`, `num_neurons`;
- mapping.py `to_env_vars`, `to_cmd_args`, `split_by_criteria`; params.py (the names);
- __init__.py `SM_EFA_NCCL_INSTANCES`, `SM_EFA_RDMA_INSTANCES` and torch_distributed.py
  `TorchDistributedRunner._setup` (the EFA/NCCL variables) and `_create_command` (nodes, rank, master).
tests/sagemaker/test_toolkit_oracle.py runs the toolkit itself on the same /opt/ml tree and compares.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# params.py: SAGEMAKER_HYPERPARAMETERS, SAGEMAKER_PREFIX
SAGEMAKER_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "default_user_module_name",
    "_tuning_objective_metric",
    "sagemaker_s3_output",
)
SAGEMAKER_PREFIX = "sagemaker_"
# environment.py get_distribution_instance_groups_from_resource_config: any of these turns distribution on
DISTRIBUTION_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)
# __init__.py: instance types with EFA (FI_PROVIDER=efa) and with EFA RDMA
EFA_NCCL_INSTANCES = (
    "ml.g4dn.8xlarge",
    "ml.g4dn.12xlarge",
    "ml.g5.48xlarge",
    "ml.p3dn.24xlarge",
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.48xlarge",
    "ml.p5e.48xlarge",
    "ml.trn1.32xlarge",
    "ml.p6e-gb200.36xlarge",
)
EFA_RDMA_INSTANCES = (
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.48xlarge",
    "ml.p5e.48xlarge",
    "ml.trn1.32xlarge",
    "ml.p6e-gb200.36xlarge",
)
LOG_LEVEL_INFO = 20  # logging.INFO, the toolkit's default log level


@dataclass(frozen=True)
class HostFacts:
    """What the toolkit asks the machine: `nvidia-smi --list-gpus`, `cpu_count()`, `neuron-ls`, `which smddprun`."""

    num_gpus: int = 0
    num_cpus: int = 1
    num_neurons: int = 0
    smddprun: bool = False
    smddpmprun: bool = False
    region: str | None = None  # boto3.session.Session().region_name, used when no sagemaker_region


def decode_hyperparameters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """environment.read_hyperparameters: each value JSON-decoded, else kept as it is."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        with contextlib.suppress(ValueError, TypeError):
            value = json.loads(value)
        out[key] = value
    return out


def _decode(obj: Any) -> str:
    """mapping._decode (Python 3 branch)."""
    if obj is None:
        return ""
    if isinstance(obj, bytes):
        return obj.decode("latin1")
    return str(obj)


def to_cmd_args(mapping: Mapping[str, Any]) -> list[str]:
    """mapping.to_cmd_args: `--key value` in sorted key order (`-k` for one letter; dicts as k=v,...)."""
    args: list[str] = []
    for key in sorted(mapping):
        name = _decode(key)
        args.append((f"--{name}" if len(name) > 1 else f"-{name}") if name else "")
        value = mapping[key]
        if hasattr(value, "items"):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append(_decode(value))
    return args


def to_env_vars(mapping: Mapping[str, Any]) -> dict[str, str]:
    """mapping.to_env_vars: `SM_<KEY>`; strings as they are, None as "", the rest compact sorted JSON."""

    def value_text(value: Any) -> str:
        if isinstance(value, bytes):
            return value.decode("latin1")
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    return {(f"SM_{str(k).upper()}" if k else ""): value_text(v) for k, v in mapping.items()}


def _num_neurons_for(instance_type: str, probed: int) -> int:
    """environment.num_neurons: trn2.48xlarge has 64 cores without asking `neuron-ls`."""
    return 64 if "trn2.48xlarge" in instance_type else probed


def environment(
    base_dir: str,
    resource_config: Mapping[str, Any],
    input_data_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    env: Mapping[str, str],
    facts: HostFacts,
) -> dict[str, Any]:
    """`dict(Environment())`: every property of the toolkit's Environment, by name.

    `hyperparameters` are already decoded (`decode_hyperparameters`); `base_dir` is /opt/ml.
    """
    code_dir, input_dir, output_dir = f"{base_dir}/code", f"{base_dir}/input", f"{base_dir}/output"
    included = {
        k: v for k, v in hyperparameters.items() if k in SAGEMAKER_HYPERPARAMETERS or k.startswith(SAGEMAKER_PREFIX)
    }
    user_hps = {k: v for k, v in hyperparameters.items() if k not in included}
    framework = {k: v for k, v in included.items() if k not in SAGEMAKER_HYPERPARAMETERS}
    hosts = resource_config["hosts"]
    current_host = resource_config["current_host"]
    current_group = resource_config.get("current_group_name", "homogeneousCluster")
    instance_type = resource_config.get("current_instance_type", "local")
    groups_config = resource_config.get("instance_groups", [])
    module_name = env.get("SAGEMAKER_PROGRAM")
    if module_name is None:
        module_name = str(included.get("sagemaker_program"))
    if module_name and module_name.endswith(".py"):
        module_name = module_name[:-3]
    entry_point = env.get("SAGEMAKER_PROGRAM") or included.get("sagemaker_program")
    if "sagemaker_distribution_instance_groups" in framework:
        distribution_groups = framework["sagemaker_distribution_instance_groups"]
    else:
        distribution_groups = [current_group] if any(framework.get(f, False) for f in DISTRIBUTION_FLAGS) else []
    if groups_config:
        distribution_hosts = [
            h for g in groups_config if g["instance_group_name"] in distribution_groups for h in g["hosts"]
        ]
    else:
        distribution_hosts = list(hosts)
    master = distribution_hosts[0] if distribution_hosts else hosts[0]
    mp_parameters = env.get("SM_HP_MP_PARAMETERS")
    return {
        "additional_framework_parameters": framework,
        "channel_input_dirs": {c: f"{input_dir}/data/{c}" for c in input_data_config},
        "current_host": current_host,
        "current_instance_group": current_group,
        "current_instance_group_hosts": next(
            (g["hosts"] for g in groups_config if g["instance_group_name"] == current_group), []
        ),
        "current_instance_type": instance_type,
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": env.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": hosts,
        "hyperparameters": user_hps,
        "input_config_dir": f"{input_dir}/config",
        "input_data_config": input_data_config,
        "input_dir": input_dir,
        "instance_groups": [g["instance_group_name"] for g in groups_config],
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups_config},
        "is_hetero": len(groups_config) > 1,
        "is_master": current_host == master,
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": facts.smddpmprun,
        "is_smddprun_installed": facts.smddprun,
        "job_name": env.get("TRAINING_JOB_NAME"),
        "log_level": included.get("sagemaker_container_log_level", LOG_LEVEL_INFO),
        "master_hostname": master,
        "model_dir": f"{base_dir}/model",
        "module_dir": str(included.get("sagemaker_submit_directory", code_dir)),
        "module_name": module_name,
        "network_interface_name": resource_config.get("network_interface_name", "eth0"),
        "num_cpus": facts.num_cpus,
        "num_gpus": facts.num_gpus,
        "num_neurons": _num_neurons_for(instance_type, facts.num_neurons),
        "output_data_dir": f"{output_dir}/data",
        "output_dir": output_dir,
        "output_intermediate_dir": f"{output_dir}/intermediate",
        "resource_config": resource_config,
        "topology": resource_config.get("topology", []),
        "user_entry_point": entry_point,
    }


def sm_variables(props: Mapping[str, Any]) -> dict[str, str]:
    """Environment.to_env_vars: the `SM_*` variables the user's script sees."""
    env: dict[str, Any] = {
        "hosts": props["hosts"],
        "network_interface_name": props["network_interface_name"],
        "hps": props["hyperparameters"],
        "user_entry_point": props["user_entry_point"],
        "framework_params": props["additional_framework_parameters"],
        "resource_config": props["resource_config"],
        "input_data_config": props["input_data_config"],
        "output_data_dir": props["output_data_dir"],
        "channels": sorted(props["channel_input_dirs"]),
        "current_host": props["current_host"],
        "current_instance_type": props["current_instance_type"],
        "current_instance_group": props["current_instance_group"],
        "current_instance_group_hosts": props["current_instance_group_hosts"],
        "instance_groups": props["instance_groups"],
        "instance_groups_dict": props["instance_groups_dict"],
        "distribution_instance_groups": props["distribution_instance_groups"],
        "is_hetero": props["is_hetero"],
        "module_name": props["module_name"],
        "log_level": props["log_level"],
        "framework_module": props["framework_module"],
        "input_dir": props["input_dir"],
        "input_config_dir": props["input_config_dir"],
        "output_dir": props["output_dir"],
        "num_cpus": props["num_cpus"],
        "num_gpus": props["num_gpus"],
        "num_neurons": props["num_neurons"],
        "model_dir": props["model_dir"],
        "module_dir": props["module_dir"],
        "training_env": dict(props),
        "user_args": to_cmd_args(props["hyperparameters"]),
        "output_intermediate_dir": props["output_intermediate_dir"],
    }
    if props["topology"]:
        env["topology"] = props["topology"]
    for name, path in props["channel_input_dirs"].items():
        env[f"channel_{name}"] = path
    for key, value in props["hyperparameters"].items():
        env[f"hp_{key}"] = value
    return to_env_vars(env)


def process_variables(hyperparameters: Mapping[str, Any], current_host: str, facts: HostFacts) -> dict[str, str]:
    """The plain variables Environment.__init__ sets in its own process, which the script inherits."""
    region = hyperparameters.get("sagemaker_region", facts.region)
    return {
        "SAGEMAKER_JOB_NAME": hyperparameters.get("sagemaker_job_name", ""),
        "CURRENT_HOST": current_host,
        "SAGEMAKER_REGION": region or "",
    }


def training_hosts(props: Mapping[str, Any]) -> list[str]:
    """The hosts torchrun spans: TorchDistributedRunner's `hosts` (Environment.distribution_hosts).

    trainctl's launcher always distributes, as the toolkit does with `sagemaker_torch_distributed_enabled`:
    with no distribution hyperparameter the current instance group is the distribution group
    (get_distribution_instance_groups_from_resource_config), so one launcher never trains alone.
    """
    if props["distribution_instance_groups"]:
        return list(props["distribution_hosts"])
    groups = props["instance_groups_dict"]
    if groups:
        return list(groups.get(props["current_instance_group"], {}).get("hosts", []))
    return list(props["hosts"])


def efa_variables(instance_type: str, network_interface_name: str) -> dict[str, str]:
    """TorchDistributedRunner._setup: EFA on EFA instance types, NCCL on the container's interface.

    `NCCL_PROTO=simple`, which `_setup` also sets (written for Trainium), is left out: on GPUs it
    turns off NCCL's LL/LL128 protocols; a job that wants it sets it in its own environment.
    """
    out: dict[str, str] = {}
    if instance_type in EFA_NCCL_INSTANCES:
        out["FI_PROVIDER"] = "efa"
    if instance_type in EFA_RDMA_INSTANCES:
        out["FI_EFA_USE_DEVICE_RDMA"] = "1"
        out["RDMAV_FORK_SAFE"] = "1"
    out["NCCL_SOCKET_IFNAME"] = str(network_interface_name)
    return out
