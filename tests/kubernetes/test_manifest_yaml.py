"""The manifest's bytes come from libyaml's emitter, and whatever a manifest holds reads back as the same data.

The pure-Python and libyaml emitters write different bytes for long or odd strings, so the renderer uses
libyaml only and refuses to run without it; these tests check that its output round-trips through
`yaml.safe_load` for the strings where the two emitters differ (long, escaped, non-BMP, control
characters, long keys) and for strings YAML would otherwise read as numbers, booleans or null.
TRAINCTL_K8S_EXAMPLES sets the number of random documents (default 200).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from trainctl.targets.kubernetes import yaml_bytes
from trainctl.targets.kubernetes.pod import tree_copy

EXAMPLES = int(os.environ.get("TRAINCTL_K8S_EXAMPLES", "200"))

# Strings a YAML reader would take for something else, or that need quoting, escaping or folding care.
ODD = [
    "yes", "no", "on", "off", "y", "n", "true", "False", "NULL", "null", "~", "", "1e3", "0x1F", "0o17", "012",
    "1_000", "-.inf", ".nan", "1:20", "2026-11-21", "- a", "? x", ": y", "#c", "&a", "*b", "!t", "|", "> x",
    "'q'", '"d"', "a: b", "a #b", "[x]", "{y}", "%x", "@x", "`x", "  lead", "trail  ", "a\nb", "a\n", "\n\n",
    "\t", "a\r\nb", "x" * 300, "é" * 200, "\U0001f600" * 40, "\x00", "\x07", "\x1b[0m", "\x85", "\u2028", "\ufeff",
    "k" * 129, "$(HOME) $$x", "\\", "\\n",
]  # fmt: skip
text = st.one_of(
    st.sampled_from(ODD),
    st.text(max_size=30),
    st.text(min_size=100, max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=150),
)
scalars = st.one_of(text, st.integers(), st.booleans(), st.none())
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=12
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(text, values, max_size=5))
def test_any_manifest_data_round_trips(data: dict[str, Any]) -> None:
    assert yaml.safe_load(yaml_bytes.manifest_yaml(data)) == data


class _StockNoAliases(yaml.CSafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(text, values, max_size=5))
def test_fast_representer_gives_libyamls_own_bytes(data: dict[str, Any]) -> None:
    stock = yaml.dump(data, Dumper=_StockNoAliases, sort_keys=False, allow_unicode=True, width=1000)
    assert yaml_bytes.manifest_yaml(data) == stock


def test_tree_copy_is_deep_and_equal() -> None:
    tree = {"a": [{"b": "c", "n": None, "i": 1, "t": True, "f": 0.5}], "d": {"e": ["x"]}, "tup": ("y", ["z"])}
    copied = tree_copy(tree)
    assert copied == tree
    copied["a"][0]["b"] = "changed"
    copied["d"]["e"].append("w")
    copied["tup"][1].append("v")
    assert tree == {"a": [{"b": "c", "n": None, "i": 1, "t": True, "f": 0.5}], "d": {"e": ["x"]}, "tup": ("y", ["z"])}


@pytest.mark.parametrize("value", ODD)
def test_odd_strings_round_trip_as_keys_and_values(value: str) -> None:
    data = {"metadata": {"annotations": {value: value}}, "command": [value, "x"]}
    assert yaml.safe_load(yaml_bytes.manifest_yaml(data)) == data


def test_emitter_is_libyaml_with_no_aliases() -> None:
    shared = {"a": 1}
    text = yaml_bytes.manifest_yaml({"x": shared, "y": shared})
    assert "&" not in text and "*" not in text
    assert text == "x:\n  a: 1\ny:\n  a: 1\n"
    assert issubclass(yaml_bytes._c_dumper(), yaml.CSafeDumper)


def test_without_libyaml_it_refuses_instead_of_switching_emitters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeDumper")
    monkeypatch.setattr(yaml_bytes, "_DUMPER", None)
    with pytest.raises(RuntimeError, match="built without libyaml"):
        yaml_bytes.manifest_yaml({"a": 1})
