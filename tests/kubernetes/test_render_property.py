"""Property: every valid job renders to a manifest both schemas and the webhook rules accept.

TRAINCTL_K8S_EXAMPLES sets the number of random jobs (default 200; CI keeps it small for time).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from k8s_testlib import assert_valid
from trainctl import Job, JobError
from trainctl.targets.kubernetes.render import render, webhook_problems

EXAMPLES = int(os.environ.get("TRAINCTL_K8S_EXAMPLES", "200"))

names = st.from_regex(r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True)
label_values = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True)
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: (
        n not in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}
    )
)
paths = st.one_of(
    st.from_regex(r"/[a-z0-9_/.-]{1,30}", fullmatch=True),
    st.from_regex(r"[a-z0-9_][a-z0-9_/.-]{0,30}", fullmatch=True),
    st.builds(lambda c, p: f"pvc://{c}/{p}", names, st.from_regex(r"[a-z0-9_/.-]{0,20}", fullmatch=True)),
)
memory = st.builds(lambda n, u: f"{n}{u}", st.integers(1, 4096), st.sampled_from(["Mi", "Gi", "G", "M"]))


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    nodes = draw(st.integers(1, 16))
    gpus = draw(st.integers(0, 8))
    elastic = draw(st.booleans())
    job: dict[str, Any] = {
        "name": draw(names),
        "resources": {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "procs_per_node": draw(st.none() | st.integers(1, max(gpus, 1))) if gpus else draw(st.integers(1, 8)),
            "cpus_per_proc": draw(st.integers(1, 16)),
            "memory": draw(st.none() | memory),
            "max_restarts": draw(st.integers(0, 5)),
        },
        "data": draw(st.dictionaries(st.sampled_from(["train", "val", "extra"]), paths, max_size=3)),
        "env": draw(st.dictionaries(env_names, st.text(max_size=20), max_size=3)),
        "max_runtime": draw(st.none() | st.integers(1, 10**6)),
        "retries": draw(st.integers(0, 3)),
        "spot": draw(st.booleans()),
    }
    if elastic:
        lo = draw(st.integers(1, nodes))
        job["resources"]["elastic"] = {"min_nodes": lo, "max_nodes": draw(st.integers(nodes, 32))}
    if draw(st.booleans()):
        job["command"] = draw(st.lists(st.text(min_size=1, max_size=10).filter(str.strip), min_size=1, max_size=4))
    else:
        job["trainer"] = {"batch_size": draw(st.integers(1, 512)), "epochs": draw(st.integers(1, 10))}
        job["data"]["train"] = draw(paths)
    secrets = draw(st.lists(st.tuples(env_names, names, st.none() | names), max_size=3, unique_by=lambda t: t[0]))
    job["secrets"] = [{"env": e, "name": n, **({"key": k} if k else {})} for e, n, k in secrets]
    api = draw(st.sampled_from(["trainjob", "pytorchjob"]))
    pytorchjob_only = api == "pytorchjob" and draw(st.booleans())  # a TrainJob refuses these (tested apart)
    job["kubernetes"] = {
        "api": api,
        "namespace": draw(names),
        "use_master": draw(st.none() | st.booleans()) if api == "pytorchjob" and not elastic else None,
        "kueue_queue": draw(st.none() | names),
        "volcano_queue": draw(st.none() | names) if pytorchjob_only else None,
        "priority_class": draw(st.none() | names) if pytorchjob_only else None,
        "scheduler_name": draw(st.none() | st.just("volcano")) if pytorchjob_only else None,
        "node_selector": draw(st.dictionaries(names, label_values, max_size=2)),
        "tolerations": draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "key": names,
                        "operator": st.just("Exists"),
                        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
                    }
                ),
                max_size=2,
            )
        ),
        "labels": draw(st.dictionaries(names, label_values, max_size=2)),
        "annotations": draw(st.dictionaries(names, st.text(max_size=20), max_size=2)),
        "pvc": draw(st.none() | names),
        "shm_size": draw(memory),
        **(
            {
                "clean_pod_policy": draw(st.sampled_from(["None", "Running", "All"])),
                "ttl_seconds_after_finished": draw(st.none() | st.integers(0, 10**6)),
            }
            if pytorchjob_only
            else {}
        ),
        "image_pull_secrets": draw(st.lists(names, max_size=2)),
    }
    return job


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(jobs())
def test_every_valid_job_renders_a_valid_manifest(data: dict[str, Any]) -> None:
    try:
        job = Job.parse(data)
    except JobError:
        assume(False)
        raise
    try:
        rendered = render(job)
    except JobError as exc:
        # Only the target's own rules may refuse a valid job, and they must say which field.
        allowed = {"name", "data.train", "data.val", "data.extra"}
        if data["kubernetes"]["api"] == "trainjob":
            allowed.add("resources.elastic")  # Trainer v2 has no elastic training
        assert all(p.split(":")[0].split(" ")[0] in allowed or p.startswith("secrets[") for p in exc.problems), (
            exc.problems
        )
        return
    if rendered.native["kind"] == "PyTorchJob":
        assert webhook_problems(rendered.native) == []
    assert rendered.text == render(job).text
    assert_valid(rendered.native)
