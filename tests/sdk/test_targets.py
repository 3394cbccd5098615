"""The target interface: the installed targets (entry points), the same package shape everywhere, options
checked the same way."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from run_cli import cli  # tests/support
from trainctl import Job, JobError
from trainctl.runs.store import RunStore
from trainctl.spec.job_spec import JobSpec
from trainctl.spec.target_section import TargetSection
from trainctl.targets import registry
from trainctl.targets.base import Target
from trainctl.targets.lookup import get_target
from trainctl.targets.plugin import TargetPlugin
from trainctl.targets.registry import PluginError, handle_type, names, plugin, sections

ROOT = Path(__file__).resolve().parents[2]
TARGETS_DIR = ROOT / "sdk" / "trainctl" / "targets"
DIGITS = ROOT / "examples" / "digits.yaml"
SHAPE = {"__init__.py", "section.py", "handle.py", "render.py", "engine.py", "target.py"}
NAMES = names()


def test_the_entry_points_are_the_one_list_of_targets() -> None:
    assert NAMES == ("kubernetes", "local", "sagemaker", "slurm")
    folders = {p.name for p in TARGETS_DIR.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(NAMES)
    # The job's section fields are exactly the installed targets, each of its plug-in's section type.
    section_fields = {
        name
        for name, field in JobSpec.model_fields.items()
        if any(isinstance(k, type) and issubclass(k, TargetSection) for k in getattr(field.annotation, "__args__", ()))
    }
    assert section_fields == set(NAMES) == set(sections())
    for name in NAMES:
        target = get_target(name)
        assert isinstance(target, Target) and target.name == name
        assert target.section is sections()[name] is plugin(name).section
        assert target.section.__module__ == f"trainctl.targets.{name}.section"
        assert handle_type(name).__module__ == f"trainctl.targets.{name}.handle"


def test_the_targets_are_the_entry_points_importlib_metadata_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry parses only the entry_points.txt files that name its group (registry._mentioning_group), and
    finds what `importlib.metadata.entry_points(group=...)` finds; where its list disagrees with itself (a package
    found twice on the path, the copies declaring different values) it decides over that list, which counts such
    a package once, and a real clash between two packages is a PluginError naming both. `_scan` is that reading;
    `_entry_points` is its answer, remembered between commands (tests/sdk/test_declared.py)."""
    from importlib import metadata

    standard = {p.name: p.value for p in metadata.entry_points(group=registry.GROUP)}
    assert {p.name: p.value for p in registry._mentioning_group()} == standard
    assert {n: p.value for n, p in registry._scan().items()} == standard
    assert {n: p.value for n, p in registry._entry_points().items()} == standard
    slurm = metadata.entry_points(group=registry.GROUP)["slurm"]
    other = metadata.EntryPoint("slurm", "elsewhere:PLUGIN", registry.GROUP)
    monkeypatch.setattr(registry, "_mentioning_group", lambda: [slurm, other])
    assert {n: p.value for n, p in registry._scan().items()} == standard  # the shadowed copy: ignored
    monkeypatch.setattr(metadata, "entry_points", lambda group: [slurm, other])
    with pytest.raises(PluginError, match=r"target 'slurm' is declared by two installed packages \(trainctl: "):
        registry._scan()


def test_a_plugin_names_its_handle_which_loads_when_a_run_is_recorded_or_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """trainctl's own plug-ins name their handle (`module:Class`), so a check or a render loads no run records
    (test_startup_imports's import budget); a class, as the toy target gives, works too; a name that does not load, or that
    is no RunHandle, is the plug-in's fault (PluginError, exit 1), named."""
    from trainctl.runs.state import RunHandle
    from trainctl.targets.slurm.handle import SlurmHandle

    assert plugin("slurm").handle == "trainctl.targets.slurm.handle:SlurmHandle"
    assert handle_type("slurm") is SlurmHandle and handle_type("nowhere") is RunHandle
    declared = plugin("slurm")
    cases = {
        SlurmHandle: None,
        "trainctl.targets.slurm.handle:Nope": "its handle trainctl.targets.slurm.handle:Nope does not load",
        "trainctl.targets.nope:Handle": "its handle trainctl.targets.nope:Handle does not load",
        "trainctl.targets.slurm.section:SlurmSection": "is not a RunHandle class",
    }
    try:
        for handle, message in cases.items():
            changed = TargetPlugin(section=declared.section, handle=handle, target=declared.target)
            monkeypatch.setattr(registry, "plugin", lambda name, changed=changed: changed)
            handle_type.cache_clear()
            if message is None:
                assert handle_type("slurm") is SlurmHandle
                continue
            with pytest.raises(PluginError, match=message) as raised:
                handle_type("slurm")
            assert raised.value.exit_code == 1 and "target 'slurm'" in str(raised.value)
    finally:
        monkeypatch.undo()
        handle_type.cache_clear()


def test_an_unknown_target_is_exit_2_naming_the_installed_ones() -> None:
    with pytest.raises(
        JobError, match="target: got 'slurn' \\(did you mean \"slurm\"\\?\\); expected one of kubernetes"
    ):
        get_target("slurn")
    with pytest.raises(JobError, match="expected one of kubernetes, local, sagemaker, slurm"):
        Job.from_yaml(DIGITS).section("ray")


@pytest.mark.parametrize("name", NAMES)
def test_every_target_package_has_the_same_files(name: str) -> None:
    files = {p.name for p in (TARGETS_DIR / name).glob("*.py")}
    assert files >= SHAPE, f"targets/{name}/ lacks {sorted(SHAPE - files)}"


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_submit_option_is_exit_2_naming_it_on_every_target(
    name: str, trainctl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before the job is checked for the target or anything is sent: nothing is recorded."""
    job = Job.from_yaml(DIGITS)
    with pytest.raises(JobError) as info:
        job.submit(target=name, wiat=True)
    assert info.value.exit_code == 2
    (problem,) = info.value.problems
    assert problem.startswith(f"submit option 'wiat': unknown to the {name} target"), problem
    known = list(get_target(name).options.model_fields)
    assert (f"it takes {', '.join(known)}" if known else "it takes none") in problem
    assert RunStore().list() == []


def test_a_mistyped_submit_option_is_refused_naming_it() -> None:
    with pytest.raises(JobError, match="submit option wait: got 'yes'"):
        get_target("slurm").parse_options(wait="yes")
    with pytest.raises(JobError, match="submit option via: got 'boto'"):
        get_target("sagemaker").parse_options(via="boto")
    with pytest.raises(JobError, match='unknown to the slurm target \\(did you mean "wait"\\?\\)'):
        get_target("slurm").parse_options(wiat=True)
    opts = get_target("slurm").parse_options(wait=True, timeout=60)
    assert opts.model_dump() == {"wait": True, "timeout": 60.0, "poll": 2.0}
    when = datetime(2026, 1, 1)
    assert get_target("sagemaker").parse_options(via="estimator", now=when).model_dump()["now"] == when


def test_cli_submit_options_go_through_the_same_check(trainctl_home: Path) -> None:
    result = cli("submit", str(DIGITS), "--target", "local", "-O", "via=estimator")
    assert result.exit_code == 2, result.output
    assert "submit option 'via': unknown to the local target" in result.stderr
    result = cli("submit", str(DIGITS), "--target", "slurm", "-O", "wait=maybe")
    assert result.exit_code == 2 and "submit option wait: got 'maybe'" in result.stderr
    result = cli("submit", str(DIGITS), "-O", "novalue")
    assert result.exit_code == 2 and "--option 'novalue': expected key=value" in result.stderr
    assert RunStore().list() == []


def test_submit_has_no_flag_of_one_target() -> None:
    """Issue 23: `--via`/`--local` were the sagemaker target's options on the generic command; `-O` says them."""
    result = cli("submit", "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--via" not in result.output and "--local" not in result.output
    assert "-O via=estimator or -O local=true (sagemaker)" in " ".join(result.output.split())
    result = cli("submit", str(DIGITS), "--target", "sagemaker", "--local")
    assert result.exit_code == 2 and "No such option: --local" in result.stderr


def test_target_names_in_the_cli_help_come_from_the_entry_points() -> None:
    result = cli("submit", "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "kubernetes, local, sagemaker or slurm" in result.output


def test_section_as_gives_each_target_its_own_class_and_refuses_another() -> None:
    """JobSpec.section_as, the one typed downcast the targets' modules use: the job's section (or its
    defaults) as the plug-in's class; asked for another class it names both."""
    job = Job.parse({"name": "x", "command": ["true"], "slurm": {"partition": "gpu"}})
    for name in names():
        kind = plugin(name).section
        assert type(job.section_as(name, kind)) is kind
    assert job.section_as("slurm", plugin("slurm").section).partition == "gpu"
    with pytest.raises(TypeError, match="slurm section is a SlurmSection, not a KubernetesSection"):
        job.section_as("slurm", plugin("kubernetes").section)
