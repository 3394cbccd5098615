"""JobSet (sigs.k8s.io/jobset v0.12.0, the version Trainer v2.3.0 pins) and the batch Job controller it
drives (kubernetes pkg/controller/job), ported for one JobSet: child Jobs, their indexed pods in the
API server, the failure policy with restarts, and the JobSet's conditions. Pods run through `PodRunner`.
"""

from __future__ import annotations

import copy
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from pod_runner import PodRunner, RunningPod

# api/jobset/v1alpha2/jobset_types.go label keys
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTARTS = "jobset.sigs.k8s.io/restart-attempt"  # constants.RestartsKey
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # batch.JobCompletionIndexAnnotation
JOB_NAME = "batch.kubernetes.io/job-name"


@dataclass
class ChildJob:
    """A batch Job and its pods, as the Job controller tracks them."""

    name: str
    rjob: str
    index: int
    spec: dict[str, Any]
    labels: dict[str, str]
    pods: dict[int, RunningPod] = field(default_factory=dict)
    failed_pods: int = 0
    succeeded: set[int] = field(default_factory=set)
    condition: tuple[str, str, str] | None = None  # (type, reason, message) once finished


def gen_job_name(js_name: str, rjob: str, idx: int) -> str:
    """pkg/util/placement GenJobName."""
    return f"{js_name}-{rjob}-{idx}"


class JobSetController:
    """Runs one JobSet to its end: Completed or Failed, with restarts per its failure policy."""

    def __init__(self, core: Any, namespace: str, runner: PodRunner) -> None:
        self.core = core
        self.ns = namespace
        self.runner = runner
        self.restarts = 0
        self.restarts_towards_max = 0
        self.events: list[tuple[str, str]] = []  # (reason, message), as the controller records them

    # --- jobset_controller.go constructJob / labelAndAnnotateObject
    def construct_job(self, js: dict[str, Any], rjob: dict[str, Any], idx: int) -> ChildJob:
        name = gen_job_name(js["metadata"]["name"], rjob["name"], idx)
        spec = copy.deepcopy(rjob["template"]["spec"])
        labels = {
            JOBSET_NAME: js["metadata"]["name"],
            REPLICATED_JOB_NAME: rjob["name"],
            RESTARTS: str(self.restarts),
            JOB_INDEX: str(idx),
        }
        tmpl = spec["template"]
        tmpl.setdefault("metadata", {})
        tmpl["metadata"]["labels"] = {**(tmpl["metadata"].get("labels") or {}), **labels}
        tmpl["metadata"]["annotations"] = {**(tmpl["metadata"].get("annotations") or {}), **labels}
        if (js["spec"].get("network") or {}).get("enableDNSHostnames", True):
            tmpl["spec"]["subdomain"] = (js["spec"].get("network") or {}).get("subdomain") or js["metadata"]["name"]
        return ChildJob(name=name, rjob=rjob["name"], index=idx, spec=spec, labels=labels)

    # --- kubernetes pkg/controller/job: manageJob for an Indexed Job
    def create_pod(self, job: ChildJob, index: int) -> None:
        tmpl = copy.deepcopy(job.spec["template"])
        meta = tmpl["metadata"]
        # indexed_job_utils.go addCompletionIndexAnnotation / addCompletionIndexLabel
        meta["annotations"][COMPLETION_INDEX] = str(index)
        meta["labels"][COMPLETION_INDEX] = str(index)
        meta["labels"][JOB_NAME] = job.name
        # podGenerateNameWithIndex: "<job>-<index>-" + 5 random characters
        meta["name"] = f"{job.name}-{index}-{secrets.token_hex(3)[:5]}"
        # job_controller.go manageJob: indexed pods get the hostname "<job>-<index>"
        tmpl["spec"]["hostname"] = f"{job.name}-{index}"
        # indexed_job_utils.go addCompletionIndexEnvVariables (init and regular containers)
        for c in (tmpl["spec"].get("initContainers") or []) + tmpl["spec"]["containers"]:
            env = c.setdefault("env", [])
            if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in env):
                env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                    "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}})  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
        created = self.core.create_namespaced_pod(self.ns, pod)
        pod = self.core.api_client.sanitize_for_serialization(created)
        job.pods[index] = self.runner.start(pod)

    def _pod_failure_action(self, job: ChildJob, container: str, code: int) -> str | None:
        """pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy (onExitCodes rules)."""
        for rule in (job.spec.get("podFailurePolicy") or {}).get("rules") or []:
            req = rule.get("onExitCodes")
            if req is None or req.get("containerName") not in (None, container):
                continue
            inside = code in req["values"]
            if (req["operator"] == "In") == inside:
                return str(rule["action"])
        return None

    def step_job(self, job: ChildJob) -> None:
        """One sync of a running Job: reap pods, apply podFailurePolicy and backoffLimit, or complete."""
        for index, rp in list(job.pods.items()):
            if rp.exit_code is not None:
                continue
            code = self.runner.poll(rp)
            if code is None:
                continue
            container = rp.pod["spec"]["containers"][0]["name"]
            self.runner.finish(rp, "Succeeded" if code == 0 else "Failed")
            if code == 0:
                job.succeeded.add(index)
                continue
            action = self._pod_failure_action(job, container, code)
            if action == "FailJob":
                job.condition = ("Failed", "PodFailurePolicy",
                                 f"Container {container} for pod {self.ns}/{rp.name} failed with exit code {code} "
                                 "matching FailJob rule at index 0")  # fmt: skip
                break
            if action == "Ignore":
                self.create_pod(job, index)
                continue
            job.failed_pods += 1
            # job_controller.go: failed pods beyond backoffLimit fail the Job (reason BackoffLimitExceeded)
            if job.failed_pods > job.spec.get("backoffLimit", 6):
                job.condition = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
                break
            self.create_pod(job, index)
        if job.condition is not None and job.condition[0] == "Failed":
            for rp in job.pods.values():  # a failed Job's active pods are deleted
                self.runner.kill(rp)
        elif len(job.succeeded) == job.spec.get("completions", 1):
            job.condition = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")

    def delete_pods(self, jobs: list[ChildJob]) -> None:
        for job in jobs:
            for rp in job.pods.values():
                self.runner.kill(rp)
                self.core.delete_namespaced_pod(rp.name, self.ns, _preload_content=False)

    # --- failure_policy.go executeFailurePolicy
    def failure_policy(self, js: dict[str, Any], failed: ChildJob) -> tuple[str, str, str] | None:
        """None: restart the JobSet; else the JobSet's Failed condition (type, reason, message)."""
        policy = js["spec"].get("failurePolicy")
        if policy is None:
            return (
                "Failed",
                "FailedJobs",
                f"jobset failed due to one or more job failures (first failed job: {failed.name})",
            )
        assert failed.condition is not None
        _, reason, message = failed.condition
        action = "RestartJobSet"  # defaultFailurePolicyRuleAction
        for rule in policy.get("rules") or []:  # findFirstFailedPolicyRuleAndJob / ruleIsApplicable
            reasons = rule.get("onJobFailureReasons") or []
            patterns = rule.get("onJobFailureMessagePatterns") or []
            targets = rule.get("targetReplicatedJobs") or []
            if (not reasons or reason in reasons) and (not patterns or any(re.search(p, message) for p in patterns)) \
                    and (not targets or failed.rjob in targets):  # fmt: skip
                action = rule["action"]
                break
        if action == "FailJobSet":  # failJobSetActionApplier
            return ("Failed", "FailJobSetFailurePolicyAction",
                    f"applying FailJobSet failure policy action (first failed job: {failed.name})")  # fmt: skip
        # restartJobSetActionApplier
        if action == "RestartJobSet" and self.restarts_towards_max >= policy.get("maxRestarts", 0):
            return ("Failed", "ReachedMaxRestarts",
                    f"jobset failed due to reaching max number of restarts (first failed job: {failed.name})")  # fmt: skip
        self.restarts += 1
        if action == "RestartJobSet":
            self.restarts_towards_max += 1
        self.events.append(("RestartJobSetFailurePolicyAction", f"restarting jobset (first failed job: {failed.name})"))
        return None

    def run(self, js: dict[str, Any], on_status: Any = None, timeout: float = 600) -> tuple[str, str, str]:
        """Run the JobSet to its end; `on_status(conditions, jobs)` is called as its status changes."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = [
                self.construct_job(js, rjob, idx)
                for rjob in js["spec"]["replicatedJobs"]
                for idx in range(rjob.get("replicas", 1))
            ]
            for job in jobs:
                for index in range(job.spec.get("completions", 1)):
                    self.create_pod(job, index)
            if on_status:
                on_status(None, jobs)
            while not any(j.condition and j.condition[0] == "Failed" for j in jobs) and not all(
                j.condition for j in jobs
            ):
                if time.monotonic() > deadline:
                    self.delete_pods(jobs)
                    raise TimeoutError(f"JobSet {js['metadata']['name']} did not finish in {timeout}s")
                time.sleep(0.3)
                for job in jobs:
                    if job.condition is None:
                        self.step_job(job)
            failed = [j for j in jobs if j.condition and j.condition[0] == "Failed"]
            if not failed:  # success_policy.go: operator All over every replicated job
                done = ("Completed", "AllJobsCompleted", "jobset completed successfully")
                if on_status:
                    on_status(done, jobs)
                return done
            verdict = self.failure_policy(js, failed[0])
            if verdict is not None:
                # jobset_controller.go Reconcile: a finished JobSet deletes its active child Jobs only
                # (`deleteJobs(ownedJobs.active)`); a failed or completed Job keeps its pods, and their logs.
                self.delete_pods([j for j in jobs if j.condition is None])
                if on_status:
                    on_status(verdict, jobs)
                return verdict
            # a restart: every Job of the previous attempt is deleted (`deleteJobs(ownedJobs.previous)`)
            self.delete_pods(jobs)
