"""A generated corpus of broken job files: each one exits 2 from `trainctl validate` and from
`trainctl submit --target local`, names the field or the line, shows no traceback, takes under a
second, and submits nothing (no registry row, no process, nothing in the state dir).

The corpus is made by hypothesis from two valid jobs: wrong types, missing fields, unknown fields
and typos, negative and huge numbers, empty strings, unicode, YAML anchors and deep nesting,
YAML syntax errors, binary junk; plus a 100 MB file.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_cli import cli  # tests/support

from .conftest import descendants, report

CORPUS = int(os.environ.get("RELIABILITY_CORPUS", "400"))

TRAINER_JOB: dict[str, Any] = {
    "name": "digits",
    "trainer": {"model": "digits", "batch_size": 32, "epochs": 2, "lr": 0.003, "optimizer": "adamw"},
    "resources": {"nodes": 1, "procs_per_node": 2, "cpus_per_proc": 1, "memory": "4Gi", "max_restarts": 1},
    "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
    "checkpoint": {"every_steps": 50, "keep": 2},
    "env": {"FOO": "bar"},
    "secrets": [{"env": "HF_TOKEN", "name": "hf-token"}],
    "max_runtime": "30m",
    "retries": 1,
    "spot": False,
}
COMMAND_JOB: dict[str, Any] = {
    "name": "command-job",
    "command": ["python", "train.py", "--epochs", "1"],
    "resources": {"nodes": 2, "procs_per_node": 1},
    "env": {"A": "1"},
    "retries": 0,
}

# (path, what the field is): every path exists in TRAINER_JOB
INT_FIELDS: dict[str, tuple[int | None, int | None]] = {  # path -> (min, max) accepted
    "resources.nodes": (1, 4096), "resources.procs_per_node": (1, 128), "resources.cpus_per_proc": (1, 512),
    "resources.max_restarts": (0, 100), "trainer.batch_size": (1, 1_000_000), "trainer.epochs": (1, 100_000),
    "checkpoint.every_steps": (1, None), "checkpoint.keep": (1, 1000), "retries": (0, 100),
}  # fmt: skip
FLOAT_FIELDS = {"trainer.lr": (0.0, 10.0)}  # exclusive minimum
STR_FIELDS = ("name", "max_runtime", "resources.memory", "trainer.model", "data.train", "env.FOO")
BOOL_FIELDS = ("spot",)
ENUM_FIELDS = {"trainer.optimizer": ["adam", "SGD", "lamb", ""]}
EMPTY_BREAKS = ("name", "max_runtime", "resources.memory", "trainer.model", "data.train", "secrets[0].env",
                "secrets[0].name")  # fmt: skip
UNICODE_BAD = {
    "name": ["dígits", "\uff44\uff49\uff47\uff49\uff54\uff53", "digits\u200b", "digits\u00a0job", "ديجيتس"],
    "resources.memory": ["\uff14Gi", "4 Gí"],
    "max_runtime": ["\uff13\uff10m", "30мин"],
    "secrets[0].env": ["TÖKEN", "HF\u200bTOKEN"],
}
SECTIONS = {"": TRAINER_JOB, "resources": TRAINER_JOB["resources"], "trainer": TRAINER_JOB["trainer"],
            "checkpoint": TRAINER_JOB["checkpoint"]}  # fmt: skip

SEEN: Counter[str] = Counter()
TEXTS: set[bytes] = set()


def _set(job: dict[str, Any], path: str, value: Any) -> None:
    node: Any = job
    parts = path.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    node[int(last) if last.isdigit() else last] = value


def _field_case(path: str, value: Any, cls: str) -> tuple[str, bytes, list[str]]:
    job = copy.deepcopy(TRAINER_JOB)
    _set(job, path, value)
    where = path.split(".")[0] if path.startswith(("data.", "env.")) else path
    return cls, yaml.safe_dump(job, allow_unicode=True).encode(), [where]


@st.composite
def wrong_type(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    kind = draw(st.sampled_from(["int", "str", "bool", "dict", "list"]))
    value: Any
    if kind == "int":
        path = draw(st.sampled_from(sorted(INT_FIELDS)))
        value = draw(st.sampled_from(["many", [1], {"n": 1}, 1.5, "1e3x", None if path == "retries" else "?"]))
    elif kind == "str":
        path = draw(st.sampled_from(STR_FIELDS))
        value = draw(
            st.sampled_from([[1], {"a": "b"}, ["x", "y"], 3 if path not in ("max_runtime", "env.FOO") else [3]])
        )  # env: 3 is "3"
    elif kind == "bool":
        path, value = draw(st.sampled_from(BOOL_FIELDS)), draw(st.sampled_from(["maybe", [True], {"y": 1}, 2]))
    elif kind == "dict":
        path, value = (
            draw(st.sampled_from(["env", "data", "trainer.model_args"])),
            draw(st.sampled_from([["a"], "a=b"])),
        )
    else:
        path, value = draw(st.sampled_from(["secrets", "secrets[0]"])), draw(st.sampled_from(["hf-token", 7]))
    if value is None:
        value = "none"
    return _field_case(path, value, "wrong type")


@st.composite
def bad_number(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    if draw(st.booleans()):
        fpath, (flo, fhi) = draw(st.sampled_from(sorted(FLOAT_FIELDS.items())))
        big = st.floats(min_value=fhi, exclude_min=True)
        value = draw(st.one_of(st.floats(max_value=flo), big, st.just(1e308)))
        return _field_case(fpath, value, "negative/huge number")
    path = draw(st.sampled_from(sorted(INT_FIELDS)))
    lo, hi = INT_FIELDS[path]
    choices = [st.integers(max_value=(lo or 0) - 1, min_value=-(10**30))]
    if hi is not None:
        choices.append(st.integers(min_value=hi + 1, max_value=10**40))
    return _field_case(path, draw(st.one_of(*choices)), "negative/huge number")


@st.composite
def empty_string(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    path = draw(st.sampled_from(EMPTY_BREAKS))
    return _field_case(path, draw(st.sampled_from(["", " ", "\t"])) if path != "name" else "", "empty string")


@st.composite
def bad_unicode(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    path = draw(st.sampled_from(sorted(UNICODE_BAD)))
    return _field_case(path, draw(st.sampled_from(UNICODE_BAD[path])), "unicode")


@st.composite
def bad_enum(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    path = draw(st.sampled_from(sorted(ENUM_FIELDS)))
    return _field_case(path, draw(st.sampled_from(ENUM_FIELDS[path])), "wrong type")


@st.composite
def missing(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    job = copy.deepcopy(TRAINER_JOB)
    which = draw(st.sampled_from(["name", "program", "both", "train", "secret-env", "secret-name"]))
    expect = {"name": "name", "program": "command", "both": "command", "train": "train", "secret-env": "secrets[0].env",
              "secret-name": "secrets[0].name"}[which]  # fmt: skip
    if which == "name":
        del job["name"]
    elif which == "program":
        del job["trainer"]
    elif which == "both":
        job["command"] = ["python", "x.py"]
    elif which == "train":
        del job["data"]["train"]
    else:
        del job["secrets"][0][which.split("-")[1]]
    return "missing field", yaml.safe_dump(job).encode(), [expect]


def _typo(word: str, op: int, i: int) -> str:
    i %= len(word)
    if op == 0 and len(word) > 3:
        return word[:i] + word[i + 1 :]  # drop a letter
    if op == 1 and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]  # swap two
    if op == 2:
        return word[:i] + word[i] + word[i:]  # double one
    return word[:i] + ("x" if word[i] != "x" else "q") + word[i + 1 :]  # replace one


@st.composite
def typo(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    section = draw(st.sampled_from(sorted(SECTIONS)))
    keys = sorted(k for k in SECTIONS[section] if len(k) >= 4)
    key = draw(st.sampled_from(keys))
    wrong = _typo(key, draw(st.integers(0, 3)), draw(st.integers(0, 40)))
    job = copy.deepcopy(TRAINER_JOB)
    node = job if not section else job[section]
    if wrong == key or wrong in node:
        wrong = key + "_"
    node[wrong] = node.pop(key)
    path = f"{section}.{wrong}" if section else wrong
    return "unknown field/typo", yaml.safe_dump(job).encode(), [path, f'did you mean "{key}"']


@st.composite
def unknown(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    section = draw(st.sampled_from(sorted(SECTIONS)))
    name = "zz" + draw(st.text("qwxjk0123456789_", min_size=3, max_size=12))
    job = copy.deepcopy(TRAINER_JOB)
    (job if not section else job[section])[name] = draw(st.sampled_from([1, "x", [1], {"a": 1}]))
    return (
        "unknown field/typo",
        yaml.safe_dump(job).encode(),
        [f"{section}.{name}" if section else name, "unknown field"],
    )


VALID_TEXT = yaml.safe_dump(TRAINER_JOB)


@st.composite
def yaml_level(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    kind = draw(st.sampled_from(["laughs", "merge-unknown", "recursive", "deep-flow", "deep-block", "duplicate",
                                 "tab", "unclosed", "long-int", "not-a-mapping"]))  # fmt: skip
    if kind == "laughs":
        width, levels = draw(st.integers(6, 12)), draw(st.integers(7, 10))
        lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
        for i in range(1, levels):
            lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
        text = "\n".join(lines) + "\n" + VALID_TEXT
        return "YAML anchors (billion laughs)", text.encode(), ["line "]
    if kind == "merge-unknown":
        text = "x-base: &base {nodes: 2, nodez: 3}\n" + VALID_TEXT.replace("resources:\n", "resources:\n  <<: *base\n")
        return "YAML anchors (merge)", text.encode(), ["nodez"]
    if kind == "recursive":
        return "YAML anchors (recursive)", (VALID_TEXT + "command: &c [python, *c]\n").encode(), ["nested", "line "]
    if kind == "deep-flow":
        n = draw(st.integers(33, 20000))
        return "deep nesting", (VALID_TEXT + "x: " + "[" * n + "]" * n + "\n").encode(), ["line "]
    if kind == "deep-block":
        n = draw(st.integers(33, 400))
        body = "".join(" " * (i + 1) + f"k{i}:\n" for i in range(n)) + " " * (n + 1) + "v\n"
        return "deep nesting", (VALID_TEXT + "env:\n" + body).encode(), ["line "]
    if kind == "duplicate":
        key = draw(st.sampled_from(["name: other", "retries: 2", "spot: true"]))
        return "YAML syntax", (VALID_TEXT + key + "\n").encode(), ["line ", "duplicate key"]
    if kind == "tab":
        return "YAML syntax", VALID_TEXT.replace("  nodes", "\tnodes").encode(), ["line "]
    if kind == "unclosed":
        return (
            "YAML syntax",
            (VALID_TEXT + draw(st.sampled_from(['x: "abc\n', "y: [1, 2\n", "z: {a: 1\n"]))).encode(),
            ["line "],
        )
    if kind == "long-int":
        return (
            "negative/huge number",
            (VALID_TEXT + "retries: 1" + "0" * draw(st.integers(4300, 9000)) + "\n")
            .encode()
            .replace(b"retries: 1\n", b"", 1),
            ["line "],
        )
    top = draw(st.sampled_from(["- a\n- b\n", "just a string\n", "42\n", "~\n", "", "[]\n"]))
    return "not a mapping", top.encode(), ["mapping", "empty", "line "]


@st.composite
def junk(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    raw = draw(st.binary(min_size=1, max_size=4096))
    kind = draw(st.sampled_from(["nul", "latin1", "random"]))
    if kind == "nul":
        raw = raw[: len(raw) // 2] + b"\x00" + raw[len(raw) // 2 :]
    elif kind == "latin1":
        raw = VALID_TEXT.encode().replace(b"digits", b"d\xefgits")
    else:
        raw = b"\xff\xfe" + raw
    return "binary junk", raw, ["job.yaml"]


ANY_CASE = st.one_of(wrong_type(), bad_number(), empty_string(), bad_unicode(), bad_enum(), missing(), typo(),
                     unknown(), yaml_level(), junk())  # fmt: skip


def timed_cli(argv: list[str]) -> tuple[int, str, float, BaseException | None]:
    """(exit code, stdout and stderr, CPU seconds, the exception the CLI did not turn into an exit code). CPU
    seconds of this thread, which runs the CLI, not wall time: a loaded CI machine stretched a deep-nesting case
    to 1.09 s of wall time once, past the 1 s bound, which is for the check's own work."""
    started = time.thread_time()
    result = cli(*argv)
    took = time.thread_time() - started
    exc = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, took, exc


def state_files(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The state dir, after one warm-up run so that first-import time is not charged to a case."""
    path = tmp_path_factory.mktemp("trainctl-home")
    job = path / "warm.yaml"
    job.write_text(VALID_TEXT)
    # kubernetes: its data and secrets live on the cluster (locally validate would refuse the missing files)
    argv = ["validate", str(job), "--target", "kubernetes"]
    result = cli(*argv, env={"TRAINCTL_HOME": str(path / "warm-state")})
    assert result.exit_code == 0, result.output
    cli("submit", str(path / "missing.yaml"), "--target", "local")
    return path


@pytest.fixture(autouse=True)
def _state(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCTL_HOME", str(home / "state"))


def check_refused(job_file: Path, expect: list[str], home: Path, cls: str) -> float:
    """Both commands refuse the file with exit 2; returns the slower one's seconds."""
    slowest = 0.0
    before = set(descendants(os.getpid()))  # the session's servers (an MLflow fixture's) may run already
    for argv in (["validate", str(job_file)], ["submit", str(job_file), "--target", "local"]):
        code, out, took, exc = timed_cli(argv)
        slowest = max(slowest, took)
        shown = out[:600]
        assert exc is None, f"{cls}: {argv[0]} raised {type(exc).__name__}: {exc}\n{shown}"
        assert code == 2, f"{cls}: {argv[0]} exit {code}\n{shown}"
        assert "Traceback" not in out, shown
        assert any(e in out for e in expect), f"{cls}: {argv[0]}: none of {expect} in:\n{shown}"
        assert took < 1.0, f"{cls}: {argv[0]} took {took:.2f}s of CPU"
    assert state_files(home / "state") in ([], ["runs.db"], ["runs.db", "runs.db-shm", "runs.db-wal"]) or not any(
        "run" in f and not f.startswith("runs.db") for f in state_files(home / "state")
    ), state_files(home / "state")
    assert not set(descendants(os.getpid())) - before, "a process was started"
    return slowest


def registry_rows(home: Path) -> int:
    from trainctl.runs.store import RunStore

    db = home / "state" / "runs.db"
    return len(RunStore(db).list()) if db.exists() else 0


@pytest.mark.slow  # 400 generated files, 33 s in CI
@settings(max_examples=CORPUS, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])  # fmt: skip
@given(case=ANY_CASE)
def test_generated_broken_job_files_are_refused(case: tuple[str, bytes, list[str]], home: Path) -> None:
    cls, raw, expect = case
    with tempfile.TemporaryDirectory() as tmp:
        job_file = Path(tmp) / "job.yaml"
        job_file.write_bytes(raw)
        took = check_refused(job_file, expect, home, cls)
    assert registry_rows(home) == 0
    SEEN[cls] += 1
    SEEN["_slowest_ms"] = max(SEEN["_slowest_ms"], int(took * 1000))
    TEXTS.add(raw)


def test_corpus_figures() -> None:
    """Runs after the generated test (file order): the corpus was big and covered every class."""
    classes = {k: v for k, v in SEEN.items() if not k.startswith("_")}
    report("bad-input-corpus", files=len(TEXTS), runs=sum(classes.values()), classes=classes,
           slowest_ms=SEEN["_slowest_ms"], refused=sum(classes.values()))  # fmt: skip
    assert len(TEXTS) >= min(200, CORPUS - 20), len(TEXTS)
    for cls in ("wrong type", "missing field", "unknown field/typo", "negative/huge number", "empty string",
                "unicode", "YAML anchors (billion laughs)", "deep nesting", "binary junk"):  # fmt: skip
        assert classes.get(cls, 0) > 0, f"no {cls} case generated: {classes}"


@pytest.fixture(scope="module")
def huge_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("huge") / "job.yaml"
    line = VALID_TEXT.encode() + b"# " + b"x" * 1000 + b"\n"
    with open(path, "wb") as fh:
        fh.write(line)
        pad = b"#" + b"y" * 1022 + b"\n"
        for _ in range(100 * 1024):
            fh.write(pad)
    assert path.stat().st_size >= 100 * 1024 * 1024
    return path


def test_100_mb_job_file_is_refused_quickly(huge_file: Path, home: Path) -> None:
    took = check_refused(huge_file, ["bytes"], home, "100 MB file")
    report("bad-input-100mb", files=1, refused=1, seconds=round(took, 3))


SAMPLE = [
    ("wrong type", b"name: digits\ntrainer: {train_data: a.jsonl}\nresources: {nodes: many}\n", "resources.nodes"),
    ("typo", b"name: digits\ntrainer: {train_data: a.jsonl}\nresourcse: {nodes: 2}\n", 'did you mean "resources"'),
    ("missing", b"trainer: {train_data: a.jsonl}\n", "name"),
    ("huge", b"name: digits\ntrainer: {train_data: a.jsonl, batch_size: 100000000000}\n", "trainer.batch_size"),
    ("empty", b"name: ''\ncommand: [python]\n", "name"),
    ("unicode", "name: dígits\ncommand: [python]\n".encode(), "name"),
    ("laughs", b"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", "line "),
    ("deep", b"name: x\ncommand: " + b"[" * 50000 + b"\n", "line "),
    ("junk", bytes(range(256)) * 4, "binary"),
]  # fmt: skip


@pytest.mark.slow
def test_sample_through_a_real_subprocess(tmp_path: Path, home: Path) -> None:
    """The same promises through the installed entry point (`python -m trainctl`), not CliRunner."""
    env = {**os.environ, "TRAINCTL_HOME": str(home / "state")}
    rows: list[dict[str, Any]] = []
    for cls, raw, expect in SAMPLE:
        job_file = tmp_path / f"{cls}.yaml"
        job_file.write_bytes(raw)
        for argv in (["validate", str(job_file)], ["submit", str(job_file), "--target", "local"]):
            started = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "trainctl", *argv], env=env, capture_output=True, text=True, timeout=30
            )
            took = time.perf_counter() - started
            rows.append({"case": cls, "cmd": argv[0], "exit": proc.returncode, "seconds": round(took, 2)})
            assert proc.returncode == 2, (cls, argv, proc.stderr)
            assert expect in proc.stderr, (cls, argv, proc.stderr)
            assert "Traceback" not in proc.stderr + proc.stdout
            assert took < 5.0, rows[-1]  # interpreter start-up included; the check itself is in-process < 1 s
    assert registry_rows(home) == 0
    report("bad-input-subprocess", runs=len(rows), refused=sum(r["exit"] == 2 for r in rows),
           slowest_s=max(r["seconds"] for r in rows))  # fmt: skip
