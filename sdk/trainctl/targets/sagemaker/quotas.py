"""The account's SageMaker quota for each instance type the job asks for, read from Service Quotas before the
training job is created.

SageMaker has no limit on InstanceCount in its service model (botocore's `sagemaker` model: `TrainingInstanceCount`
has a minimum only); the limit is the account's quota per instance type and region, and CreateTrainingJob
passes it only to fail: "ResourceLimitExceeded: The account-level service limit 'ml.p4d.24xlarge for training
job usage' is 4 Instances, with current utilization of 0 Instances and a request delta of 8 Instances". That
quota is the Service Quotas quota named `<instance type> for training job usage` under service code
`sagemaker` (ListServiceQuotas; botocore's `service-quotas` model), so submit reads it first and refuses a
job that asks for more instances of a type than the quota allows, with the quota, its code and the command
that asks for more. A quota that cannot be read (no `servicequotas:ListServiceQuotas` permission, an
endpoint without Service Quotas, such as a test's) is not a refusal: SageMaker still decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from .groups import resource_config

SERVICE = "sagemaker"
QUOTA_NAME = "{} for training job usage"  # AWS's name of the per-type training quota


def instances_asked(job: JobSpec) -> dict[str, int]:
    """{instance type: instances} of the request's ResourceConfig (one type, or its instance groups')."""
    config = resource_config(job, volume_size_gb=1)
    groups = config.get("InstanceGroups") or [config]
    asked: Counter[str] = Counter()
    for group in groups:
        asked[str(group["InstanceType"])] += int(group["InstanceCount"])
    return dict(asked)


def training_quotas(client: Any, wanted: set[str]) -> dict[str, dict[str, Any]]:
    """{instance type: its ServiceQuota} for the types in `wanted`, from ListServiceQuotas' pages (stopping
    once every wanted one is found); {} when the quotas cannot be read."""
    from botocore.exceptions import BotoCoreError, ClientError

    names = {QUOTA_NAME.format(t): t for t in wanted}
    found: dict[str, dict[str, Any]] = {}
    try:
        pages = client.get_paginator("list_service_quotas").paginate(
            ServiceCode=SERVICE, PaginationConfig={"PageSize": 100}
        )
        for page in pages:
            for quota in page.get("Quotas") or []:
                if quota.get("QuotaName") in names:
                    found[names[quota["QuotaName"]]] = quota
            if len(found) == len(names):
                break
    except (BotoCoreError, ClientError):
        return {}
    return found


def over_quota(
    asked: Mapping[str, int], quotas: Mapping[str, Mapping[str, Any]], region: str, parallel: int = 1
) -> list[str]:
    """A problem for each instance type asked beyond its quota, `parallel` training jobs at once (a tuning
    job's MaxParallelTrainingJobs). The value is instances across the account's running training jobs, so
    other jobs' use counts too: SageMaker's refusal says so, with its current utilization."""
    problems = []
    for itype, each in sorted(asked.items()):
        count = each * parallel
        quota = quotas.get(itype)
        if quota is None or quota.get("Value") is None or count <= float(quota["Value"]):
            continue
        value, code = int(float(quota["Value"])), quota.get("QuotaCode", "?")
        problems.append(
            f"sagemaker: {count} {itype} instance(s) asked"
            + (f" ({parallel} training jobs at once, {each} each)" if parallel > 1 else "")
            + f", and this account's quota "
            f"'{QUOTA_NAME.format(itype)}' in {region} is {value} (Service Quotas code {code}); ask for more with "
            f"`aws service-quotas request-service-quota-increase --service-code {SERVICE} --quota-code {code} "
            f"--desired-value {count} --region {region}`, or ask for fewer nodes or another instance type"
        )
    return problems


def check_quotas(job: JobSpec, session: Any, parallel: int = 1) -> None:
    """Refuse (JobError, exit 2) a job, or `parallel` of its trials at once, over the account's training quota
    for one of its instance types."""
    from botocore.config import Config

    asked = instances_asked(job)
    # best effort: one try, short timeouts, so an endpoint without Service Quotas costs submit little
    config = Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=15)
    client = session.client("service-quotas", config=config)
    problems = over_quota(asked, training_quotas(client, set(asked)), str(session.region_name), parallel)
    if problems:
        raise JobError(problems)
