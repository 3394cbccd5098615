"""The engine contract (targets/engine_contract.py): every built-in engine keeps `Engine`, and has exactly the
capabilities its table says, so `Target` asks each what it always asked by name."""

from __future__ import annotations

import importlib

import pytest
from trainctl.runs.state import RunRef
from trainctl.targets import engine_contract as contract
from trainctl.targets.lookup import get_target
from trainctl.targets.sagemaker.handle import SageMakerHandle

CAPABILITIES = {
    "ReadsProgress": contract.ReadsProgress,
    "ReadsOutput": contract.ReadsOutput,
    "ReturnsResults": contract.ReturnsResults,
    "StatusOfMany": contract.StatusOfMany,
    "ProgressOfMany": contract.ProgressOfMany,
    "MetricsOfMany": contract.MetricsOfMany,
    "FetchesCheckpoints": contract.FetchesCheckpoints,
    "FetchesOutput": contract.FetchesOutput,
    "PlacesCheckpoint": contract.PlacesCheckpoint,
}
TABLE = {
    "local": {"ReadsProgress", "ReadsOutput", "ReturnsResults", "FetchesOutput"},
    "slurm": {"ReadsProgress", "ReadsOutput", "ReturnsResults", "StatusOfMany", "ProgressOfMany", "MetricsOfMany"},
    "kubernetes": {"ReadsProgress", "ReturnsResults", "StatusOfMany"},
    "sagemaker": {"ReturnsResults", "StatusOfMany", "FetchesCheckpoints", "FetchesOutput"},
    "sagemaker.local_engine": {"ReadsProgress", "ReadsOutput", "ReturnsResults", "FetchesCheckpoints", "FetchesOutput"},
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_engine_has_the_capabilities_its_table_says(name: str) -> None:
    module = importlib.import_module(f"trainctl.targets.{name if '.' in name else name + '.engine'}")
    assert isinstance(module, contract.Engine)
    assert {cap for cap, proto in CAPABILITIES.items() if isinstance(module, proto)} == TABLE[name]


def test_sagemaker_picks_the_local_mode_engine_per_run() -> None:
    from trainctl.targets.sagemaker import engine, local_engine

    target = get_target("sagemaker")
    local = RunRef(target="sagemaker", native_id="j", handle=SageMakerHandle(local=True))
    aws = RunRef(target="sagemaker", native_id="j", handle=SageMakerHandle(region="us-east-1"))
    assert target.engine_for(local) is local_engine
    assert target.engine_for(aws) is engine
    assert get_target("local").engine_for(aws) is importlib.import_module("trainctl.targets.local.engine")


def test_only_slurm_schedules_arrays() -> None:
    arrays = {t for t in TABLE if "." not in t and isinstance(get_target(t), contract.SchedulesArrays)}
    assert arrays == {"slurm"}
