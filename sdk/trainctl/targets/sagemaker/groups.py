"""Heterogeneous clusters: `sagemaker.instance_groups` -> ResourceConfig.InstanceGroups. Pure.

SageMaker takes either InstanceType/InstanceCount or InstanceGroups, never both, and when any channel
names its instance groups (S3DataSource.InstanceGroupNames) every channel must. The group marked
`train: true` is the distribution group: the hyperparameter `sagemaker_distribution_instance_groups`
names it, and both trainctl's launcher and the sagemaker-training toolkit then run torchrun on its
hosts only, its first host the master (toolkit environment.py `get_distribution_hosts`,
`get_master_hostname`); the other groups' hosts run the program once, without torchrun.
"""

from __future__ import annotations

from typing import Any

from ...spec.job_spec import JobSpec
from .instances import INSTANCE_TYPES, lookup
from .limits import INSTANCE_GROUP_NAME_MAX, MAX_INSTANCE_GROUPS
from .section import InstanceGroup, SageMakerSection


def training_group(job: JobSpec) -> InstanceGroup | None:
    return next((g for g in job.section_as("sagemaker", SageMakerSection).instance_groups if g.train), None)


def instance_type(job: JobSpec) -> str | None:
    """The instance type the training processes run on (the training group's, in a heterogeneous cluster)."""
    group = training_group(job)
    return group.instance_type if group is not None else job.section_as("sagemaker", SageMakerSection).instance_type


def group_problems(job: JobSpec, channels: list[str]) -> list[str]:
    sec = job.section_as("sagemaker", SageMakerSection)
    groups = sec.instance_groups
    if not groups:
        return []
    problems: list[str] = []
    if sec.instance_type is not None:
        problems.append(
            "sagemaker.instance_type: not together with sagemaker.instance_groups (each group names its type; "
            "SageMaker refuses InstanceType beside InstanceGroups)"
        )
    if len(groups) > MAX_INSTANCE_GROUPS:
        problems.append(
            f"sagemaker.instance_groups: {len(groups)} groups; SageMaker allows at most {MAX_INSTANCE_GROUPS}"
        )
    names = [g.name for g in groups]
    for i, group in enumerate(groups):
        where = f"sagemaker.instance_groups[{i}]"
        if not 1 <= len(group.name) <= INSTANCE_GROUP_NAME_MAX:
            problems.append(f"{where}.name: 1 to {INSTANCE_GROUP_NAME_MAX} characters")
        if names.count(group.name) > 1:
            problems.append(f"{where}.name: {group.name!r} is used twice")
        if lookup(group.instance_type) is None:
            problems.append(
                f"{where}.instance_type: {group.instance_type!r} is not a known training instance type; "
                f"known: {', '.join(INSTANCE_TYPES)}"
            )
        for channel in group.channels:
            if channel not in channels:
                problems.append(f"{where}.channels: {channel!r} is not a data input (have: {', '.join(channels)})")
    trainers = [g for g in groups if g.train]
    if len(trainers) != 1:
        problems.append(
            f"sagemaker.instance_groups: exactly one group needs train: true (the one torchrun spans); got {len(trainers)}"
        )
    elif trainers[0].count != job.resources.nodes:
        problems.append(
            f"resources.nodes: {job.resources.nodes}, but the training group {trainers[0].name!r} has count "
            f"{trainers[0].count}; make them equal"
        )
    assigned = {c for g in groups for c in g.channels}
    if assigned:
        missing = [c for c in channels if c not in assigned]
        if missing:
            problems.append(
                f"sagemaker.instance_groups: channels {', '.join(missing)} are in no group's channels; when any "
                "group lists channels SageMaker needs every channel assigned"
            )
    return problems


def resource_config(job: JobSpec, volume_size_gb: int) -> dict[str, Any]:
    sec = job.section_as("sagemaker", SageMakerSection)
    if not sec.instance_groups:
        return {
            "InstanceType": sec.instance_type,
            "InstanceCount": job.resources.nodes,
            "VolumeSizeInGB": volume_size_gb,
        }
    return {
        "InstanceGroups": [
            {"InstanceType": g.instance_type, "InstanceCount": g.count, "InstanceGroupName": g.name}
            for g in sec.instance_groups
        ],
        "VolumeSizeInGB": volume_size_gb,
    }


def channel_group_names(job: JobSpec, channel: str, shared: bool) -> list[str] | None:
    """InstanceGroupNames for one channel: its groups; every group for `shared` ones (the code channel)."""
    groups = job.section_as("sagemaker", SageMakerSection).instance_groups
    if not any(g.channels for g in groups):
        return None
    if shared:
        return [g.name for g in groups]
    return [g.name for g in groups if channel in g.channels]


def distribution_groups(job: JobSpec) -> list[str] | None:
    group = training_group(job)
    return [group.name] if group is not None else None
