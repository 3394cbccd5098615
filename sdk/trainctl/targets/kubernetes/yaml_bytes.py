"""A manifest's exact bytes: block YAML from libyaml's emitter, keys in the order built, no aliases."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode


def _c_dumper() -> type[Any]:
    """libyaml's emitter, with aliases off. One emitter everywhere, so a job's bytes never depend on
    how PyYAML was installed: without libyaml we refuse rather than fall back to the pure-Python
    emitter, whose output differs for long or odd strings (same data, other bytes)."""
    base = getattr(yaml, "CSafeDumper", None)
    if base is None:
        raise RuntimeError(
            "trainctl renders Kubernetes manifests with libyaml's emitter (yaml.CSafeDumper), but this PyYAML "
            f"({yaml.__version__}) was built without libyaml; install a PyYAML wheel (they bundle libyaml) or "
            "build it against libyaml (e.g. `apt-get install libyaml-dev` then `pip install --no-binary pyyaml pyyaml`)"
        )

    class _NoAliases(base):  # type: ignore[valid-type,misc]
        def ignore_aliases(self, data: Any) -> bool:
            return True

        def represent_data(self, data: Any) -> Any:
            """SafeRepresenter's nodes for plain JSON-like data, without its per-object alias and type-MRO
            bookkeeping (most of a manifest's dump time); anything else goes the usual way. Block style,
            no default style and keys unsorted only (what `manifest_yaml` asks for)."""
            kind = type(data)
            if kind is str:
                return ScalarNode(_STR, data)
            if kind is dict:
                rep = self.represent_data
                return MappingNode(_MAP, [(rep(k), rep(v)) for k, v in data.items()], flow_style=False)
            if kind is list:
                rep = self.represent_data
                return SequenceNode(_SEQ, [rep(v) for v in data], flow_style=False)
            if kind is bool:
                return ScalarNode(_BOOL, "true" if data else "false")
            if kind is int:
                return ScalarNode(_INT, str(data))
            if data is None:
                return ScalarNode(_NULL, "null")
            return super().represent_data(data)

    return _NoAliases


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_BOOL, _INT, _NULL = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:null"


_DUMPER: type[Any] | None = None


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """The exact bytes of a manifest: block YAML, keys in the order built, no aliases, libyaml's emitter."""
    global _DUMPER
    if _DUMPER is None:
        _DUMPER = _c_dumper()
    text: str = yaml.dump(manifest, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=1000)
    return text
