"""kube-scheduler's filters that decide where the test kubelet places a pod, ported for the fields trainctl
renders: the NodeAffinity filter (pod.spec.nodeSelector and the required node affinity) and the pod-count
rule of NodeResourcesFit, then the FitError message a pod that fits no node gets in its PodScheduled
condition. Pure: nodes and pods in, a node name or the scheduler's message out.

Sources (kubernetes/kubernetes):
- pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go: `Filter` (ErrReasonPod), `PreFilter`
  (the matchFields metadata.name conflict);
- staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go:
  `GetRequiredNodeAffinity`, `RequiredNodeAffinity.Match`, `NewLazyErrorNodeSelector`,
  `LazyErrorNodeSelector.Match`, `nodeSelectorTerm.match`, `nodeSelectorRequirementsAsSelector`,
  `nodeSelectorRequirementsAsFieldSelector`, `extractNodeFields`;
- staging/src/k8s.io/apimachinery/pkg/labels/selector.go: `NewRequirement` (what a requirement must hold),
  `Requirement.Matches` (each operator), `SelectorFromSet`;
- pkg/scheduler/framework/plugins/noderesources/fit.go `fitsRequest`: "Too many pods";
- pkg/scheduler/framework/types.go `FitError.Error`: "0/N nodes are available: <count> <reason>, ...".
Not ported: scoring (the first node that passes is taken, in name order), taints, resources other than the
pod count, and PostFilter's preemption sentence at the end of the message (no pod here can be preempted).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"  # node_affinity.go ErrReasonPod
ERR_REASON_CONFLICT = "pod affinity terms conflict"  # node_affinity.go errReasonConflict
TOO_MANY_PODS = "Too many pods"  # fit.go fitsRequest
OBJECT_NAME_FIELD = "metadata.name"  # metav1.ObjectNameField
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # fmt: skip
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class ParseError(ValueError):
    """A requirement NewRequirement refuses: its term matches nothing (the error shows only if no term matched)."""


def _int(text: str) -> int:
    """strconv.ParseInt(text, 10, 64)."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(text)
    return int(text)


def check_requirement(key: str, op: str, values: list[str]) -> None:
    """selector.go NewRequirement: a qualified-name key; In/NotIn one value or more; Exists/DoesNotExist none;
    Gt/Lt exactly one, an integer; every value a valid label value."""
    if len(key) > 316 or not _QUALIFIED.match(key) or len(key.rpartition("/")[2]) > 63:
        raise ParseError(f"key: Invalid value: {key!r}")
    if op in ("In", "NotIn") and not values:
        raise ParseError("values: Required value: for 'in', 'notin' operators, values set can't be empty")
    if op in ("Exists", "DoesNotExist") and values:
        raise ParseError("values: Forbidden: values set must be empty for exists and does not exist")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ParseError("values: Required value: for 'Gt', 'Lt' operators, exactly one value is required")
        try:
            _int(values[0])
        except ValueError:
            raise ParseError(
                "values[0]: Invalid value: for 'Gt', 'Lt' operators, the value must be an integer"
            ) from None
    for v in values:
        if len(v) > 63 or not _LABEL_VALUE.match(v):
            raise ParseError(f"values: Invalid value: {v!r}")


def requirement_matches(key: str, op: str, values: list[str], labels: dict[str, str]) -> bool:
    """selector.go Requirement.Matches, for the operators nodeSelectorRequirementsAsSelector maps to."""
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        try:
            have, want = _int(labels[key]), _int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _label_requirements(exprs: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """nodeSelectorRequirementsAsSelector: an unknown operator or a bad requirement is a parse error."""
    out = []
    for expr in exprs:
        op = expr.get("operator", "")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise ParseError(f"operator: Unsupported value: {op!r}")
        values = list(expr.get("values") or [])
        check_requirement(expr["key"], op, values)
        out.append((expr["key"], op, values))
    return out


def _field_requirements(exprs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """nodeSelectorRequirementsAsFieldSelector: In/NotIn with exactly one value each (ANDed)."""
    out = []
    for expr in exprs:
        op, values = expr.get("operator", ""), list(expr.get("values") or [])
        if op not in ("In", "NotIn"):
            raise ParseError(f"operator: Unsupported value: {op!r}")
        if len(values) != 1:
            raise ParseError("values: Invalid value: must have one element")
        out.append((expr["key"], op, values[0]))
    return out


def term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelectorTerm.match: every matchExpressions requirement on the node's labels and every matchFields
    one on its fields (extractNodeFields: metadata.name, when it has one). Raises ParseError for a bad term."""
    labels = dict((node.get("metadata") or {}).get("labels") or {})
    name = (node.get("metadata") or {}).get("name") or ""
    fields = {OBJECT_NAME_FIELD: name} if name else {}
    label_reqs = _label_requirements(term.get("matchExpressions") or [])
    field_reqs = _field_requirements(term.get("matchFields") or [])
    if label_reqs and not all(requirement_matches(k, op, v, labels) for k, op, v in label_reqs):
        return False
    if field_reqs and fields:  # `len(nodeFields) > 0`: a node without a name is not judged by its fields
        for key, op, value in field_reqs:  # fields.OneTermEqualSelector / OneTermNotEqualSelector
            if (fields.get(key) == value) != (op == "In"):
                return False
    return True


def required_node_affinity_matches(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """GetRequiredNodeAffinity + RequiredNodeAffinity.Match: pod.spec.nodeSelector (SelectorFromSet: every
    key equal), then the required terms ORed (LazyErrorNodeSelector.Match; an empty term is skipped by
    NewLazyErrorNodeSelector, a term with a parse error matches nothing). Filter ignores the parse error."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))  # fmt: skip
    if required is None:
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or [] if t.get("matchExpressions") or t.get("matchFields")]
    for term in terms:
        try:
            if term_matches(term, node):
                return True
        except ParseError:
            continue
    return False


def prefilter_conflict(pod: dict[str, Any]) -> bool:
    """node_affinity.go PreFilter: every required term names nodes by matchFields metadata.name In, and the
    names they allow, intersected within a term and joined across terms, are none: UnschedulableAndUnresolvable."""
    required = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))  # fmt: skip
    terms = (required or {}).get("nodeSelectorTerms") or []
    if not terms:
        return False
    names: set[str] = set()
    for term in terms:
        term_names: set[str] | None = None
        for r in term.get("matchFields") or []:
            if r.get("key") == OBJECT_NAME_FIELD and r.get("operator") == "In":
                s = set(r.get("values") or [])
                term_names = s if term_names is None else term_names & s
        if term_names is None:
            return False  # a term without node names: every node is eligible
        names |= term_names
    return not names


def filter_reasons(pod: dict[str, Any], node: dict[str, Any], pods_on_node: int) -> list[str]:
    """Why `node` is not for `pod` (empty: it fits). The filters run in the default profile's order
    (pkg/scheduler/apis/config/v1/default_plugins.go: NodeAffinity before NodeResourcesFit) and the first
    that rejects the node ends its check (pkg/scheduler/framework/runtime/framework.go RunFilterPlugins):
    NodeAffinity's Filter, then NodeResourcesFit's pod count (status.allocatable.pods; a node that states
    none takes any number here)."""
    if not required_node_affinity_matches(pod, node):
        return [ERR_REASON_POD]
    allowed = ((node.get("status") or {}).get("allocatable") or {}).get("pods")
    if allowed is not None and pods_on_node + 1 > int(allowed):
        return [TOO_MANY_PODS]
    return []


def fit_error(num_nodes: int, reasons_per_node: dict[str, list[str]], prefilter_msg: str = "") -> str:
    """types.go FitError.Error: `0/N nodes are available:` then the PreFilter message, or each reason with
    the number of nodes that gave it, sorted as strings and joined by ", ", ending in "."."""
    msg = f"0/{num_nodes} nodes are available:"
    if prefilter_msg:
        return f"{msg} {prefilter_msg}."
    counts = Counter(r for reasons in reasons_per_node.values() for r in reasons)
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    return f"{msg} {', '.join(parts)}." if parts else msg


def fake_node(name: str, max_pods: int | None = None) -> dict[str, Any]:
    """A Node as a kubelet registers it: its name, the well-known `kubernetes.io/hostname` label
    (pkg/kubelet/kubelet_node_status.go initialNode), and `status.allocatable.pods` (the kubelet's --max-pods)."""
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}  # fmt: skip
    if max_pods is not None:
        node["status"] = {"allocatable": {"pods": str(max_pods)}}
    return node


def schedule(pod: dict[str, Any], nodes: list[dict[str, Any]], load: dict[str, int]) -> tuple[str | None, str]:
    """(the node the pod goes to, "") or (None, the FitError message), the nodes tried in name order;
    `load`: pods already bound to each node and not finished."""
    if prefilter_conflict(pod):
        return None, fit_error(len(nodes), {}, ERR_REASON_CONFLICT)
    ordered = sorted(nodes, key=lambda n: n["metadata"]["name"])
    reasons: dict[str, list[str]] = {}
    for node in ordered:
        name = node["metadata"]["name"]
        found = filter_reasons(pod, node, load.get(name, 0))
        if not found:
            return name, ""
        reasons[name] = found
    return None, fit_error(len(nodes), reasons)
