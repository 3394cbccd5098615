"""The targets' entry points, remembered between commands (targets/declared.py), and pydantic's plug-in loader
stood in for when its plug-ins are off (cli/no_plugins.py): what a render no longer imports, and that neither
hides a change: a plug-in installed, removed or edited is found on the next command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainctl.targets import declared, registry
from trainctl.targets.declared import Declared

ROOT = Path(__file__).resolve().parents[2]
STANDARD = {
    "kubernetes": "trainctl.targets.kubernetes:PLUGIN",
    "local": "trainctl.targets.local:PLUGIN",
    "sagemaker": "trainctl.targets.sagemaker:PLUGIN",
    "slurm": "trainctl.targets.slurm:PLUGIN",
}


def _site(folder: Path, points: str) -> Path:
    """A path entry holding one distribution whose entry_points.txt is `points`."""
    dist = folder / "extra_pkg-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(points)
    return folder


def test_an_entry_point_loads_as_importlib_metadata_loads_it() -> None:
    from importlib.metadata import EntryPoint

    for value in ("trainctl.targets.slurm:PLUGIN", "trainctl.targets.slurm", "trainctl.targets:registry.GROUP",
                  "trainctl.targets.slurm : PLUGIN [extra]"):  # fmt: skip
        ours, theirs = Declared("x", value), EntryPoint("x", value, registry.GROUP)
        assert ours.load() is theirs.load() and ours.module == theirs.module, value
    with pytest.raises(ValueError, match="not an entry point value"):
        Declared("x", "not a value!").load()


def test_the_fingerprint_changes_with_any_entry_points_file_on_the_path(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", "[other]\na = b:c\n")
    path = [*sys.path, str(site)]
    first = declared.fingerprint(path)
    assert declared.fingerprint(path) == first and declared.fingerprint(sys.path) != first
    points = site / "extra_pkg-1.0.dist-info" / "entry_points.txt"
    points.write_text("[trainctl.targets]\nextra = b:c\n")  # edited in place, one byte longer
    assert declared.fingerprint(path) != first
    second = declared.fingerprint(path)
    os.utime(points, ns=(time.time_ns(), time.time_ns() + 10**9))  # rewritten, same size
    assert declared.fingerprint(path) != second
    (site / "extra_pkg-1.0.dist-info").rename(site / "extra_pkg-2.0.dist-info")  # upgraded
    assert declared.fingerprint(path) not in (first, second)
    here, there = tmp_path / "here", tmp_path / "there"  # folders with no package: `python -m` run from either
    here.mkdir()
    there.mkdir()
    assert declared.fingerprint([str(here), *sys.path]) == declared.fingerprint([str(there), *sys.path])


def test_what_is_remembered_is_recalled_under_its_key_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert declared.recall("k1", registry.GROUP) is None  # no file yet
    points = [Declared(n, v) for n, v in STANDARD.items()]
    declared.remember("k1", registry.GROUP, points)
    declared.remember("k2", registry.GROUP, points[:1])
    assert declared.recall("k1", registry.GROUP) == points and declared.recall("k2", registry.GROUP) == points[:1]
    assert declared.recall("k3", registry.GROUP) is None and declared.recall("k1", "another.group") is None
    for i in range(declared.KEEP):
        declared.remember(f"n{i}", registry.GROUP, points)
    assert declared.recall("k1", registry.GROUP) is None  # the oldest keys give way
    declared.cache_file().write_text("{not json")
    assert declared.recall("n1", registry.GROUP) is None
    declared.remember("k1", registry.GROUP, points)  # a bad file is replaced
    assert declared.recall("k1", registry.GROUP) == points
    assert list(declared.cache_file().parent.iterdir()) == [declared.cache_file()]  # no partial file left


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file where the folder would be
    declared.remember("k", registry.GROUP, [Declared("a", "b:c")])
    assert declared.recall("k", registry.GROUP) is None
    registry._entry_points.cache_clear()
    try:
        assert {n: p.value for n, p in registry._entry_points().items()} == STANDARD
    finally:
        registry._entry_points.cache_clear()


def test_the_registry_answers_from_what_it_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second look-up with the same packages reads no metadata; the remembered list is the registry's answer."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    registry._entry_points.cache_clear()
    try:
        assert {n: p.value for n, p in registry._entry_points().items()} == STANDARD  # read and remembered
        registry._entry_points.cache_clear()
        monkeypatch.setattr(registry, "_scan", lambda: pytest.fail("the metadata was read again"))
        assert {n: p.value for n, p in registry._entry_points().items()} == STANDARD
    finally:
        registry._entry_points.cache_clear()


def _trainctl(args: list[str], cache: Path, **env: str) -> str:
    """`python -X importtime -m trainctl ARGS`'s stderr (which must succeed), with its own cache folder."""
    run_env = {**os.environ, "XDG_CACHE_HOME": str(cache), **env}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainctl", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=run_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def _modules(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_render_imports_no_importlib_metadata_once_the_entry_points_are_remembered(tmp_path: Path) -> None:
    args = ["render", "examples/digits.yaml", "-t", "slurm"]
    first = _modules(_trainctl(args, tmp_path))
    assert "importlib.metadata" in first  # the entry points read, then remembered
    second = _modules(_trainctl(args, tmp_path))
    assert "trainctl.spec.job_spec" in second  # the import log was read
    assert not {m for m in second if m.startswith(("importlib.metadata", "email", "zipfile", "csv"))}
    assert "pydantic.plugin._loader" not in second  # the stand-in took its place
    # a user who asks for pydantic's plug-ins gets pydantic's own loader, and with it importlib.metadata
    asked = _modules(_trainctl(args, tmp_path, PYDANTIC_DISABLE_PLUGINS="some-plugin"))
    assert {"pydantic.plugin._loader", "importlib.metadata"} <= asked


def test_a_plugin_installed_after_a_command_is_found_by_the_next(tmp_path: Path) -> None:
    """The toy target of test_plugin_target.py in miniature: a package on the path declares a target whose module
    does not load, so every command that reads the entry points fails naming it, the first time and after."""
    cache = tmp_path / "cache"
    _trainctl(["validate", "examples/digits.yaml", "-t", "slurm"], cache)
    site = _site(tmp_path / "site", "[trainctl.targets]\nextra = extra_pkg_missing:PLUGIN\n")
    proc = subprocess.run([sys.executable, "-m", "trainctl", "validate", "examples/digits.yaml", "-t", "slurm"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache),
                               "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(site)])})  # fmt: skip
    assert proc.returncode == 1 and "target 'extra': its entry point extra_pkg_missing:PLUGIN" in proc.stderr


def test_the_stand_in_for_pydantics_loader_answers_as_it_and_gives_way_for_anything_else() -> None:
    """In a fresh process with the plug-ins off: pydantic builds a model through the stand-in (no plug-ins, no
    importlib.metadata); a name the stand-in lacks brings pydantic's own loader, which then answers."""
    code = (
        "import os, sys; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\n"
        "from trainctl.cli import no_plugins\n"
        "assert no_plugins.install() and not no_plugins.install()\n"
        "from pydantic import BaseModel\n"
        "class A(BaseModel):\n    x: int\n"
        "assert A(x=1).x == 1 and sys.modules[no_plugins.LOADER] is no_plugins\n"
        "assert 'importlib.metadata' not in sys.modules\n"
        "from pydantic.plugin._loader import PYDANTIC_ENTRY_POINT_GROUP\n"
        "assert PYDANTIC_ENTRY_POINT_GROUP == 'pydantic' and sys.modules[no_plugins.LOADER] is not no_plugins\n"
        "class B(BaseModel):\n    y: int\n"
        "assert B(y=2).y == 2\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
