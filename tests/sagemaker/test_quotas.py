"""The account's per-instance-type training quota, read from Service Quotas before a training job is created
(targets/sagemaker/quotas.py).

Service Quotas answers through botocore's own `Stubber`, which checks each request and each response against
botocore's `service-quotas` model (moto serves only `vpc` quotas and answers NoSuchResource for `sagemaker`,
the path every other test here takes). The quota names are AWS's, as its refusals quote them: "The
account-level service limit 'ml.m5.large for training job usage' is 0 Instances"."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from trainctl.errors import JobError
from trainctl.job import Job
from trainctl.targets.sagemaker import engine
from trainctl.targets.sagemaker.quotas import check_quotas, instances_asked

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc)


def _quota(itype: str, value: float, code: str) -> dict[str, Any]:
    return {"ServiceCode": "sagemaker", "QuotaName": f"{itype} for training job usage", "QuotaCode": code,
            "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False}  # fmt: skip


PAGE_1 = [_quota("ml.g5.xlarge", 4.0, "L-G5X"), {**_quota("ml.g5.xlarge", 9.0, "L-PROC"),
          "QuotaName": "ml.g5.xlarge for processing job usage"}]  # fmt: skip
PAGE_2 = [_quota("ml.p4d.24xlarge", 2.0, "L-P4D"), _quota("ml.m5.large", 0.0, "L-M5L")]


def _stubbed(session: boto3.Session, pages: list[list[dict[str, Any]]] | None, error: str | None = None) -> Stubber:
    """The session's service-quotas client, stubbed: `pages` of ListServiceQuotas, or `error`."""
    client = session.client("service-quotas", region_name=session.region_name)
    stub = Stubber(client)
    if error is not None:
        stub.add_client_error("list_service_quotas", error, "not allowed", 400)
    for i, quotas in enumerate(pages or []):
        params: dict[str, Any] = {"ServiceCode": "sagemaker", "MaxResults": 100}
        if i:
            params["NextToken"] = f"page-{i}"
        more = {"NextToken": f"page-{i + 1}"} if i + 1 < len(pages or []) else {}
        stub.add_response("list_service_quotas", {"Quotas": quotas, **more}, params)
    stub.activate()
    made = session.client

    def client_for(service: str, *args: Any, **kwargs: Any) -> Any:
        return client if service == "service-quotas" else made(service, *args, **kwargs)

    session.client = client_for  # type: ignore[method-assign]
    return stub


def test_a_job_over_its_instance_types_quota_is_refused_before_anything_is_sent(spec: Any, capture: Any) -> None:
    data = spec.job_data("over-quota", resources={"nodes": 8, "gpus_per_node": 1})
    stub = _stubbed(capture.session, [PAGE_1])
    with pytest.raises(JobError) as err:
        engine.submit(Job.parse(data), now=NOW, boto_session=capture.session)
    said = str(err.value)
    assert "8 ml.g5.xlarge instance(s) asked" in said and "'ml.g5.xlarge for training job usage'" in said
    assert f"in {spec.REGION} is 4 (Service Quotas code L-G5X)" in said
    assert "--service-code sagemaker --quota-code L-G5X --desired-value 8" in said
    assert err.value.exit_code == 2
    assert [op for op, _ in capture.calls] == ["ListServiceQuotas"]  # no upload, no CreateTrainingJob
    stub.assert_no_pending_responses()


def test_within_the_quota_the_job_is_created(spec: Any, capture: Any) -> None:
    stub = _stubbed(capture.session, [PAGE_1])
    run = engine.submit(Job.parse(spec.job_data("in-quota")), now=NOW, boto_session=capture.session)
    assert capture.only("CreateTrainingJob")["ResourceConfig"]["InstanceCount"] == 2 and run.native_id
    stub.assert_no_pending_responses()


def test_the_pages_are_read_until_every_type_is_found_and_groups_add_up(spec: Any, aws: str) -> None:
    groups = [{"name": "a", "instance_type": "ml.p4d.24xlarge", "count": 1},
              {"name": "b", "instance_type": "ml.p4d.24xlarge", "count": 2},
              {"name": "c", "instance_type": "ml.g5.xlarge", "count": 1}]  # fmt: skip
    sec = spec.sagemaker_data(instance_groups=groups)
    sec.pop("instance_type")
    job = Job.parse(spec.job_data("groups", sagemaker=sec, resources={"nodes": 4, "gpus_per_node": 1}))
    assert instances_asked(job) == {"ml.p4d.24xlarge": 3, "ml.g5.xlarge": 1}
    session = boto3.Session(region_name=spec.REGION)
    stub = _stubbed(session, [PAGE_1, PAGE_2, [_quota("ml.p5.48xlarge", 1.0, "L-P5")]])
    with pytest.raises(JobError, match=r"3 ml\.p4d\.24xlarge instance\(s\) asked.* is 2 \(Service Quotas code L-P4D\)"):
        check_quotas(job, session)
    assert len(stub._queue) == 1  # type: ignore[attr-defined]  # the third page was not needed


def test_a_tuning_jobs_parallel_trials_count_together(spec: Any, aws: str) -> None:
    session = boto3.Session(region_name=spec.REGION)
    _stubbed(session, [PAGE_1])
    job = Job.parse(spec.job_data("tuned"))  # 2 ml.g5.xlarge each: 2 trials at once fit 4, 3 do not
    check_quotas(job, session, parallel=2)
    session = boto3.Session(region_name=spec.REGION)
    _stubbed(session, [PAGE_1])
    with pytest.raises(JobError, match=r"6 ml\.g5\.xlarge instance\(s\) asked \(3 training jobs at once, 2 each\)"):
        check_quotas(job, session, parallel=3)


@pytest.mark.parametrize("error", ["AccessDeniedException", "NoSuchResourceException"])
def test_a_quota_that_cannot_be_read_refuses_nothing(spec: Any, aws: str, error: str) -> None:
    session = boto3.Session(region_name=spec.REGION)
    stub = _stubbed(session, None, error=error)
    check_quotas(Job.parse(spec.job_data("unknown", resources={"nodes": 64, "gpus_per_node": 1})), session)
    stub.assert_no_pending_responses()


def test_moto_has_no_sagemaker_quotas_so_submit_goes_on(spec: Any, capture: Any) -> None:
    """The real HTTP path: moto's Service Quotas (vpc only) answers NoSuchResource, and the job is created."""
    run = engine.submit(Job.parse(spec.job_data("moto-quota")), now=NOW, boto_session=capture.session)
    assert [op for op, _ in capture.calls][:2] == ["ListServiceQuotas", "CreateTrainingJob"] and run.native_id
