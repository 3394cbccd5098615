"""The test kubelet's scheduler port (port_scheduler.py) against the cases of kube-scheduler's own tests:
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go TestNodeAffinity (the Filter verdicts,
same names, same pods and node labels), and the FitError message format of pkg/scheduler/framework/types.go."""

from __future__ import annotations

from typing import Any

import pytest
from port_scheduler import ERR_REASON_POD, TOO_MANY_PODS, filter_reasons, fit_error, prefilter_conflict, schedule


def _req(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}  # fmt: skip


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def _node(labels: dict[str, str] | None = None, name: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}}


# (upstream test name, pod spec, node labels, node name, fits)
NODE_AFFINITY_CASES: list[tuple[str, dict[str, Any], dict[str, str], str, bool]] = [
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, {}, "", False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, "", True),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar", "baz": "blah"}, "", True),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}}, {"foo": "bar"}, "", False),
    ("Pod with matchExpressions using In operator that matches the existing node",
     _req({"matchExpressions": [_expr("foo", "In", "bar", "value2")]}), {"foo": "bar"}, "", True),
    ("Pod with matchExpressions using Gt operator that matches the existing node",
     _req({"matchExpressions": [_expr("kernel-version", "Gt", "0204")]}), {"kernel-version": "0206"}, "", True),
    ("Pod with matchExpressions using NotIn operator that matches the existing node",
     _req({"matchExpressions": [_expr("mem-type", "NotIn", "DDR", "DDR2")]}), {"mem-type": "DDR3"}, "", True),
    ("Pod with matchExpressions using Exists operator that matches the existing node",
     _req({"matchExpressions": [_expr("GPU", "Exists")]}), {"GPU": "NVIDIA-GRID-K1"}, "", True),
    ("Pod with affinity that don't match node's labels won't schedule onto the node",
     _req({"matchExpressions": [_expr("foo", "In", "value1", "value2")]}), {"foo": "bar"}, "", False),
    ("Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
     _req({"matchExpressions": []}), {"foo": "bar"}, "", False),
    ("Pod with no Affinity will schedule onto a node", {}, {"foo": "bar"}, "", True),
    ("Pod with Affinity but nil NodeSelector will schedule onto a node",
     {"affinity": {"nodeAffinity": {}}}, {"foo": "bar"}, "", True),
    ("Pod with multiple matchExpressions ANDed that matches the existing node",
     _req({"matchExpressions": [_expr("GPU", "Exists"), _expr("GPU", "NotIn", "AMD", "INTER")]}),
     {"GPU": "NVIDIA-GRID-K1"}, "", True),
    ("Pod with multiple matchExpressions ANDed that doesn't match the existing node",
     _req({"matchExpressions": [_expr("GPU", "Exists"), _expr("GPU", "In", "AMD", "INTER")]}),
     {"GPU": "NVIDIA-GRID-K1"}, "", False),
    ("Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
     _req({"matchExpressions": [_expr("foo", "In", "bar", "value2")]},
          {"matchExpressions": [_expr("diffkey", "In", "wrong", "value2")]}), {"foo": "bar"}, "", True),
    ("Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, "
     "will schedule onto the node",
     {"nodeSelector": {"foo": "bar"}, **_req({"matchExpressions": [_expr("foo", "Exists")]})}, {"foo": "bar"}, "", True),
    ("Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are "
     "deprecating) is not satisfied, won't schedule onto the node",
     {"nodeSelector": {"foo": "bar"}, **_req({"matchExpressions": [_expr("foo", "Exists")]})},
     {"foo": "barrrrrr"}, "", False),
    ("Pod with an invalid value in Affinity term won't be scheduled onto the node",
     _req({"matchExpressions": [_expr("foo", "NotIn", "invalid value: ___@#$%^")]}), {"foo": "bar"}, "", False),
    ("Pod with matchFields using In operator that matches the existing node",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")]}), {}, "node1", True),
    ("Pod with matchFields using In operator that does not match the existing node",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")]}), {}, "node2", False),
    ("Pod with two terms: matchFields does not match, but matchExpressions matches",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")]},
          {"matchExpressions": [_expr("foo", "In", "bar")]}), {"foo": "bar"}, "node2", True),
    ("Pod with one term: matchFields does not match, but matchExpressions matches",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")], "matchExpressions": [_expr("foo", "In", "bar")]}),
     {"foo": "bar"}, "node2", False),
    ("Pod with one term: both matchFields and matchExpressions match",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")], "matchExpressions": [_expr("foo", "In", "bar")]}),
     {"foo": "bar"}, "node1", True),
    ("Pod with two terms: both matchFields and matchExpressions do not match",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")]},
          {"matchExpressions": [_expr("foo", "In", "not-match-to-bar")]}), {"foo": "bar"}, "node2", False),
    ("Pod with two terms of node.Name affinity",
     _req({"matchFields": [_expr("metadata.name", "In", "node1")]},
          {"matchFields": [_expr("metadata.name", "In", "node2")]}), {}, "node2", True),
    ("Pod with two conflicting mach field requirements",
     _req({"matchFields": [_expr("metadata.name", "In", "node1"), _expr("metadata.name", "In", "node2")]}),
     {"foo": "bar"}, "node2", False),
]  # fmt: skip


@pytest.mark.parametrize(("pod_spec", "labels", "node_name", "fits"), [c[1:] for c in NODE_AFFINITY_CASES],
                         ids=[c[0][:80] for c in NODE_AFFINITY_CASES])  # fmt: skip
def test_node_affinity_filter_as_upstream(pod_spec: dict[str, Any], labels: dict[str, str], node_name: str,
                                          fits: bool) -> None:  # fmt: skip
    reasons = filter_reasons({"spec": pod_spec}, _node(labels, node_name), 0)
    assert reasons == ([] if fits else [ERR_REASON_POD])


@pytest.mark.parametrize(
    ("op", "values", "label", "fits"),
    [
        ("Lt", ["0206"], "0204", True),
        ("Lt", ["0204"], "0206", False),
        ("Gt", ["0206"], "0204", False),
        ("Gt", ["x"], "5", False),  # not an integer: NewRequirement refuses the term
        ("Gt", ["1", "2"], "5", False),  # exactly one value
        ("Gt", ["1"], "five", False),  # the label is no integer: Matches says no
        ("DoesNotExist", [], None, True),
        ("DoesNotExist", [], "x", False),
        ("NotIn", ["a"], None, True),  # a node without the label passes NotIn
        ("In", [], "a", False),  # In needs values
        ("Exists", ["a"], "a", False),  # Exists takes none
    ],
)
def test_operators_as_labels_selector(op: str, values: list[str], label: str | None, fits: bool) -> None:
    """staging/src/k8s.io/apimachinery/pkg/labels/selector.go NewRequirement and Requirement.Matches."""
    pod = {"spec": _req({"matchExpressions": [{"key": "k", "operator": op, "values": values}]})}
    node = _node({} if label is None else {"k": label}, "n1")
    assert (filter_reasons(pod, node, 0) == []) is fits


def test_the_notin_hostname_term_keeps_pods_off_the_blamed_node() -> None:
    pod = {"spec": _req({"matchExpressions": [_expr("kubernetes.io/hostname", "NotIn", "n2")]})}
    nodes = [_node({"kubernetes.io/hostname": n}, n) for n in ("n1", "n2", "n3")]
    assert schedule(pod, nodes, {"n1": 0}) == ("n1", "")
    for node in nodes:
        node["status"] = {"allocatable": {"pods": "1"}}
    assert schedule(pod, nodes, {"n1": 1}) == ("n3", "")
    assert schedule(pod, nodes, {"n1": 1, "n3": 1}) == (
        None, f"0/3 nodes are available: 1 {ERR_REASON_POD}, 2 {TOO_MANY_PODS}.")  # fmt: skip


def test_fit_error_format() -> None:
    """types.go FitError.Error: reasons with their node counts, sorted as strings ("1 ..." before "2 ...")."""
    assert fit_error(3, {"a": ["y"], "b": ["x"], "c": ["x"]}) == "0/3 nodes are available: 1 y, 2 x."
    assert fit_error(2, {}, "pod affinity terms conflict") == "0/2 nodes are available: pod affinity terms conflict."


def test_prefilter_conflict_of_node_names() -> None:
    """node_affinity.go PreFilter: terms that name nodes by matchFields In, whose names meet in none."""
    both = {
        "spec": _req({"matchFields": [_expr("metadata.name", "In", "node1"), _expr("metadata.name", "In", "node2")]})
    }
    assert prefilter_conflict(both)
    assert not prefilter_conflict({"spec": _req({"matchFields": [_expr("metadata.name", "In", "node1")]})})
    assert schedule(both, [_node({}, "node1")], {})[0] is None
