"""Fixtures shared by more than one test area."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# slurm_cluster and cluster_faults, the libraries behind the SLURM cluster fixtures (appended, so that
# nothing there shadows an installed package; pytest runs with --import-mode=importlib)
sys.path.append(str(REPO / "tests" / "support"))

import etc_hosts  # noqa: E402
import suite_cost  # noqa: E402
import xdist_groups  # noqa: E402
from cluster_faults import Faults  # noqa: E402
from digits import make_digits  # noqa: E402
from mlflow_server import MlflowServer  # noqa: E402
from slurm_cluster import NETNS, Cluster, SlurmClusters  # noqa: E402

SLURM_LOCK = Path(os.environ.get("TRAINCTL_SLURM_LOCK", "/run/lock/trainctl-slurm-cluster.lock"))


@pytest.fixture(scope="session")
def slurm_cluster_lock() -> Iterator[None]:
    """This machine runs one SLURM test cluster at a time (fixed ports, /etc/slurm, /etc/hosts): a session
    that starts one holds this lock until it ends, so a second checkout's tests wait for it instead of
    restarting the cluster under the first one's jobs."""
    SLURM_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(SLURM_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def slurm_clusters(slurm_cluster_lock: None) -> Iterator[SlurmClusters]:
    """The session's one SLURM test cluster (tests/support/slurm_cluster.py), in the shape each test asks
    for; it is stopped when the session ends, while this session still holds the lock."""
    clusters = SlurmClusters()
    try:
        yield clusters
    finally:
        clusters.stop()


@pytest.fixture
def netns_cluster(slurm_clusters: SlurmClusters) -> Cluster:
    """3 nodes that are hosts to each other (`scripts/slurm-cluster.sh --netns 3 4`): own network and UTS
    namespaces, own addresses on a bridge, names in /etc/hosts, own slurmd in its own cpu cgroup."""
    return slurm_clusters.up(NETNS)


@pytest.fixture
def cluster_faults(netns_cluster: Cluster) -> Iterator[Faults]:
    """Partitions, slow links, CPU quotas, stopped ranks and dead nodes on netns_cluster, healed after the test."""
    faults = Faults(netns_cluster)
    try:
        yield faults
    finally:
        faults.heal()


# Under pytest-xdist (scripts/test.sh: `-n N --dist loadgroup`) each worker is a session of its own. Tests that
# share one thing on this machine run on one worker, in collection order, as one xdist_group:
#   slurm: the one SLURM test cluster (fixed ports, /etc/slurm); slurm_cluster_lock is held for a whole session,
#          so a second worker asking for the cluster would wait for the first worker's session to end;
#   sagemaker-local: docker_host (tests/sagemaker/conftest.py), whose teardown removes every container on the SDK's
#          fixed `sagemaker-local` network, another worker's local-mode job's included.
# Everything else (kapi, moto and mlflow on free ports, tmp_path folders, per-pid namespaces) is per worker.
XDIST_GROUPS = (("slurm", ("slurm_clusters",)), ("sagemaker-local", ("docker_host",)))
# Modules whose tests must share one process: test_corpus_figures reads what the generated test left in SEEN/TEXTS.
XDIST_MODULES = {"tests/reliability/test_bad_input.py": "bad-input-corpus"}
# Module-scoped fixtures that cost many CPU-seconds to build (trainer runs) and serve several tests. xdist builds a
# module fixture once on every worker that runs one of its tests: three workers built test_bad_input's 14 trainer
# processes three times over (46-49 s of setup each in CI). The tests that use one of these run on one worker.
XDIST_SHARED_FIXTURES = {
    ("tests/trainer/test_bad_input.py", "prepared"),  # 2 short runs, then 12 bad-input trainers at once
    ("tests/trainer/test_train_ddp.py", "reference"),  # an uninterrupted 2-rank digits run
    ("tests/reliability/test_trainer_faults.py", "reference"),  # the uninterrupted run both CI tests compare with
    ("tests/local/test_s3_stream_local.py", "stream_run"),  # the plain stream run: 1-over-N test and the staged one
    ("tests/local/test_s3_output_local.py", "uploaded_run"),  # output_dir + checkpoint.dir in S3: 2 tests' first run
}
# Session fixtures that start trainer runs for tests of several modules: outside the groups above (XDIST_GROUPS
# keep theirs and build the fixture again there), the tests that use one run on one worker, which builds it once.
XDIST_SESSION_FIXTURES: dict[str, str] = {
    "killed_source": "killed-source",  # tests/sdk/test_resume, tests/sagemaker/test_resume, test_isolation
    "fsdp_run": "fsdp-run",  # tests/trainer/conftest.py: test_fsdp, test_resume_world_size, test_final_model
    "digits_epoch_run": "digits-epoch-run",  # test_final_model, test_async_checkpoint, test_run_identity
    "streaming_whole_run": "streaming-whole-run",  # test_stream_order, test_streaming
}


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group an item runs in under xdist (None: any worker), from the fixtures it uses or its module."""
    path = item.nodeid.split("::")[0]
    if (module := XDIST_MODULES.get(path)) is not None:
        return module
    names = set(getattr(item, "fixturenames", ()))
    for module_path, fixture in XDIST_SHARED_FIXTURES:
        if path == module_path and fixture in names:
            return f"{path}::{fixture}"
    for group, fixtures in XDIST_GROUPS:
        if names.intersection(fixtures) or (group == "slurm" and item.get_closest_marker("slurm") is not None):
            return group
    shared = sorted(XDIST_SESSION_FIXTURES[name] for name in names.intersection(XDIST_SESSION_FIXTURES))
    return f"session::{shared[0]}" if shared else None


def pytest_configure(config: pytest.Config) -> None:
    xdist_groups.name_groups_file(config)
    config.pluginmanager.register(suite_cost, "suite_cost")  # per-folder seconds and CPU (tests/support/suite_cost.py)
    etc_hosts.map_v4_mapped_loopback()  # no TCPStore connect asks the resolver (tests/support/etc_hosts.py)


def pytest_unconfigure(config: pytest.Config) -> None:
    xdist_groups.remove_groups_file(config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (firstresult: the first answer is used)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """--dist loadgroup with the groups of XDIST_GROUPS (tests/support/xdist_groups.py: why not xdist's own)."""
    return xdist_groups.make_scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None


def _slurm_order(item: pytest.Item) -> tuple[bool, bool]:
    """Sort key: the --netns cluster's tests last; before them, the SLURM group's tests that run the trainer image.
    On a clean clone the image's first build takes minutes; by the end of the plain shape's tests another worker
    (tests/image, the first to ask) has built it, so the one SLURM worker does not wait on IMAGE_LOCK meanwhile."""
    names = getattr(item, "fixturenames", ())
    return "netns_cluster" in names, "trainer_image" in names and xdist_group_of(item) == "slurm"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on the --netns cluster run last, so a session starts each shape of the cluster once. Tests marked
    `long` (a fault another CI test drives through the same code, or a figure's trial loop) run only with
    TRAINCTL_LONG_TESTS=1 or RELIABILITY_TRIALS set: CI stays under 30 minutes.

    Under xdist each shared-resource group (XDIST_GROUPS) is one work unit: its tests run on one worker, in this
    order (the largest unit, the SLURM group, is handed out first)."""
    items.sort(key=_slurm_order)
    groups = {item.nodeid: group for item in items if (group := xdist_group_of(item)) is not None}
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    xdist_groups.write_groups(config, groups)
    if os.environ.get("TRAINCTL_LONG_TESTS") == "1" or os.environ.get("RELIABILITY_TRIALS"):
        return
    skip = pytest.mark.skip(reason="long: run with TRAINCTL_LONG_TESTS=1 (CI covers its path in a shorter test)")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


def _release_requeued(job_id: str) -> None:
    """Start a requeued SLURM job now instead of after SLURM's ~2 min requeue hold.

    Not within the second of the requeue: slurmd revokes the old run's credential by time stamp (1 s
    resolution), and a relaunch in that same second is killed as "Job credential revoked".
    """
    deadline = time.monotonic() + 30
    completing = ["sinfo", "-h", "-t", "completing", "-o", "%N"]
    while time.monotonic() < deadline and subprocess.run(completing, capture_output=True, text=True).stdout.strip():
        time.sleep(0.3)
    time.sleep(2.0)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=30)


@pytest.fixture
def release_requeued() -> Callable[[str], None]:
    return _release_requeued


@dataclass(frozen=True)
class TrainerImage:
    """The cpu trainer image built for this test session."""

    ref: str  # localhost/trainctl-trainer:<version>-cpu
    id: str  # the engine's image id (sha256 hex), recorded by every run
    runtime: str  # podman or docker
    build_s: float


def check_golden(path: Path, text: str) -> None:
    """`text` is the golden file at `path`, byte for byte; with UPDATE_GOLDEN=1 the file is rewritten first
    (then `git diff` shows what a change did to a render)."""
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path.name} differs from the render (if intended, UPDATE_GOLDEN=1 rewrites it)"


@pytest.fixture
def golden() -> Callable[[Path, str], None]:
    """The golden-file check (check_golden) every render test uses."""
    return check_golden


IMAGE_LOCK = Path(os.environ.get("TRAINCTL_IMAGE_LOCK", "/run/lock/trainctl-image-build.lock"))


def _image_build(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`scripts/image.sh build ...` while holding IMAGE_LOCK: xdist workers (and other checkouts) that build the
    same tag wait for the first build, then find every layer cached."""
    IMAGE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def trainer_image() -> TrainerImage:
    """`scripts/image.sh build --flavor cpu`, once per session (seconds when nothing changed).

    A missing engine fails the test (scripts/setup-containers.sh installs podman); only an
    explicit TRAINCTL_SKIP_IMAGE=1 skips, for a machine that cannot run containers at all.
    """
    if os.environ.get("TRAINCTL_SKIP_IMAGE") == "1":
        pytest.skip("TRAINCTL_SKIP_IMAGE=1: the trainer image is not built in this session")
    runtime = os.environ.get("TRAINCTL_CONTAINER_RUNTIME") or ("podman" if shutil.which("podman") else "docker")
    assert shutil.which(runtime), f"{runtime} is not installed: run scripts/setup-containers.sh"
    start = time.monotonic()
    # TRAINCTL_TEST_IMAGE_TAG: another tag, so checkouts sharing one image store do not retag each other's
    tag = os.environ.get("TRAINCTL_TEST_IMAGE_TAG")
    run = _image_build(
        ["bash", str(REPO / "scripts/image.sh"), "build", "--flavor", "cpu", *(["--tag", tag] if tag else [])]
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ref = run.stdout.strip().splitlines()[-1]
    image_id = subprocess.run(
        [runtime, "image", "inspect", ref, "--format", "{{.Id}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return TrainerImage(ref=ref, id=image_id, runtime=runtime, build_s=time.monotonic() - start)


@pytest.fixture(scope="session")
def controller_image() -> TrainerImage:
    """`scripts/image.sh build --image controller`, once per session (the SDK and the kubernetes client)."""
    if os.environ.get("TRAINCTL_SKIP_IMAGE") == "1":
        pytest.skip("TRAINCTL_SKIP_IMAGE=1: no image is built in this session")
    runtime = os.environ.get("TRAINCTL_CONTAINER_RUNTIME") or ("podman" if shutil.which("podman") else "docker")
    assert shutil.which(runtime), f"{runtime} is not installed: run scripts/setup-containers.sh"
    start = time.monotonic()
    run = _image_build(["bash", str(REPO / "scripts/image.sh"), "build", "--image", "controller"])
    assert run.returncode == 0, run.stderr[-4000:]
    ref = run.stdout.strip().splitlines()[-1]
    image_id = subprocess.run(
        [runtime, "image", "inspect", ref, "--format", "{{.Id}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return TrainerImage(ref=ref, id=image_id, runtime=runtime, build_s=time.monotonic() - start)


def digits_resume_job(data: Path, name: str, procs: int, **sections: object) -> dict[str, object]:
    """The digits job of the --resume-from tests (issue 18): checkpoints every 4 steps, all kept."""
    return {
        "name": name,
        "trainer": {"model": "digits", "batch_size": 32, "epochs": 6, "lr": 0.003, "log_every": 20},
        "resources": {"nodes": 1, "procs_per_node": procs},
        "data": {"train": str(data / "train.jsonl"), "val": str(data / "val.jsonl")},
        "checkpoint": {"every_steps": 4, "keep": 1000},
        **sections,
    }


def killed_local_run(data: Path, name: str = "src", **sections: object) -> object:
    """A 2-process local digits run cancelled (SIGTERM, then SIGKILL after the grace) after its first
    checkpoint, before its end: the source of a --resume-from (tests take it from `killed_source`)."""
    from trainctl import Job

    run = Job.parse(digits_resume_job(data, name, 2, **sections)).submit("local")
    ckpts = Path(run.paths.checkpoint_dir)
    deadline = time.monotonic() + 180
    while not list(ckpts.glob("step-*/meta.json")):
        assert time.monotonic() < deadline, "no checkpoint within 180 s:\n" + "\n".join(run.logs())
        time.sleep(0.05)
    run.cancel()
    status = run.wait(timeout=120, poll=0.2)
    assert status.state.value != "succeeded", "the source run ended before it was killed"
    assert not (Path(run.paths.output_dir) / "summary.json").exists()
    return run


@dataclass(frozen=True)
class KilledSource:
    """killed_local_run's run, made once for the tests that resume from one (`killed_source`). Its run folder
    (checkpoints, output, log) and trace are shared: a test reads them and never writes there (a resume copies
    the checkpoint it takes into the new run's own folder)."""

    run: Any  # the trainctl.Run
    record: Any  # its row in the fixture's own run store (trainctl.runs.store.RunRecord): the state it ended in
    data: Path  # the digits data it trained on (the generator's, so the same records as `digits_data`)
    trace: Path  # its TRAINER_SAMPLE_TRACE folder: rank-0.jsonl and rank-1.jsonl, each micro-batch's sample ids

    def recorded(self) -> Any:
        """The run, recorded in the run store of this test's TRAINCTL_HOME as its submit, cancel and wait left
        it in the fixture's own (the record, the state it ended in): a test that resumes from it by id."""
        from trainctl.runs.store import RunStore

        RunStore().record(self.record.run, self.record.state)
        return self.run


@pytest.fixture(scope="session")
def killed_source(tmp_path_factory: pytest.TempPathFactory) -> KilledSource:
    """killed_local_run once per session (under xdist, on each worker that runs a test using it: the SLURM
    group's and, through XDIST_SESSION_FIXTURES, one other), under a TRAINCTL_HOME of its own, on digits data of
    its own, with TRAINER_SAMPLE_TRACE set to a folder of its own. Each test has its own TRAINCTL_HOME:
    `recorded()` puts the run in that one's run store."""
    from trainctl.runs.store import RunStore

    folder = tmp_path_factory.mktemp("killed-source")
    data, trace = folder / "digits", folder / "trace"
    make_digits(data)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRAINCTL_HOME", str(folder / "trainctl-home"))
        run: Any = killed_local_run(data, env={"TRAINER_SAMPLE_TRACE": str(trace)})
        record = RunStore().get_record(run.id)
    assert record is not None and record.state.finished, record
    return KilledSource(run=run, record=record, data=data, trace=trace)


def resumed_on_slurm(data: dict[str, object], folder: Path, source_id: str) -> str:
    """`trainctl submit JOB --target slurm --resume-from SOURCE --wait` on the command line, the job written to
    `folder`; the new run's id (the run must succeed)."""
    import yaml

    job_file = folder / "moved.yaml"
    job_file.write_text(yaml.safe_dump(data))
    trainctl = str(Path(sys.prefix) / "bin" / "trainctl")
    argv = [trainctl, "submit", str(job_file), "--target", "slurm", "--resume-from", source_id, "--wait"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=os.environ)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stderr.split("submitted ", 1)[1].split()[0]


@pytest.fixture
def resume_helpers() -> object:
    """digits_resume_job and resumed_on_slurm, for tests/sdk, tests/slurm and tests/sagemaker."""
    from types import SimpleNamespace

    return SimpleNamespace(job=digits_resume_job, on_slurm=resumed_on_slurm)


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (PEP 427), built here so the test needs no index."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return out


@pytest.fixture
def make_wheel() -> Callable[[Path, str, str], Path]:
    """Build a minimal pure-Python wheel: requirements a test can install with no index."""
    return _wheel


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real MLflow tracking server (SQLite store, 127.0.0.1), one per session (tests/support/mlflow_server.py)."""
    import mlflow_server as server

    running = server.start(tmp_path_factory.mktemp("mlflow"))
    yield running
    running.stop()
