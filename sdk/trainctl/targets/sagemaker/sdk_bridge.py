"""What the two SageMaker SDK bridges share: estimator.py (SDK 2.x) and model_trainer.py (SDK 3.x).

Both are derived from the one CreateTrainingJob request (request.build_request), read field by field
through `RequestFields`: a bridge takes every leaf of the request into an argument of its SDK, or names
it as one its SDK cannot carry (a JobError naming the job's field). A leaf that no one took is a field
the bridge forgot, and building it fails (EngineError), so a field added to the request cannot be
dropped by a bridge unnoticed; tests/sagemaker/test_bridges_agree.py sends one job that sets every
field through all three ways and compares the requests key by key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import EngineError, JobError
from ...spec.job_spec import JobSpec
from .request import output_uri, section

if TYPE_CHECKING:
    import boto3

FieldPath = tuple[str, ...]
TELEMETRY_OFF = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


def leaves(tree: Mapping[str, Any], prefix: FieldPath = ()) -> Iterator[FieldPath]:
    """Every leaf's path: a non-empty mapping is a branch; anything else, lists included, is a leaf."""
    for key, value in tree.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and value:
            yield from leaves(value, path)
        else:
            yield path


def dotted(path: FieldPath) -> str:
    return ".".join(path)


def value_at(tree: Mapping[str, Any], path: FieldPath, default: Any = None) -> Any:
    node: Any = tree
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


class RequestFields:
    """A request read by one bridge: `take` marks what it carried, `finish` fails on what it did not."""

    def __init__(self, request: Mapping[str, Any], bridge: str) -> None:
        self.request = request
        self.bridge = bridge
        self._left = dict.fromkeys(leaves(request))  # an ordered set

    def get(self, *path: str, default: Any = None) -> Any:
        """The value at `path` without taking it (a bridge reads it for one argument and carries it in another)."""
        return value_at(self.request, path, default)

    def take(self, *path: str, default: Any = None) -> Any:
        """The value at `path` (a branch: all of it), marked as carried; `default` when the request has none."""
        for leaf in [p for p in self._left if p[: len(path)] == path]:
            del self._left[leaf]
        return self.get(*path, default=default)

    def take_rest(self, *path: str) -> dict[str, Any]:
        """Whatever under the branch `path` is not yet taken (the hyperparameters an SDK has no argument for)."""
        keys = dict.fromkeys(p[len(path)] for p in self._left if p[: len(path)] == path and len(p) > len(path))
        return {key: self.take(*path, key) for key in keys}

    def take_decoded(self, *path: str) -> Any:
        """A JSON-encoded hyperparameter back to its value (None when absent), marked as carried."""
        text = self.take(*path)
        return None if text is None else json.loads(text)

    def finish(self, cannot_carry: Mapping[FieldPath, str] | None = None) -> None:
        """Fail on any leaf left: a JobError for those the SDK cannot carry (`cannot_carry`: path -> the job's
        field that set it), an EngineError for the rest (the bridge forgot a field of the request)."""
        cannot_carry = cannot_carry or {}
        refused = [
            f"{field}: not something the {self.bridge} builds; use via='direct'"
            for path, field in cannot_carry.items()
            if any(p[: len(path)] == path for p in self._left)
        ]
        if refused:
            raise JobError(refused)
        if self._left:
            raise EngineError(
                f"the {self.bridge} does not carry the request's {', '.join(dotted(p) for p in self._left)} "
                "(a field request.build_request writes that the bridge does not map)",
                hint="use via='direct' meanwhile",
            )


def check_run_fields(
    built: Mapping[str, Any], run: Mapping[str, Any], at_send: tuple[FieldPath, ...], bridge: str
) -> None:
    """The run's request differs from the one the SDK object was built from only where the bridge takes the run's
    own values when it sends it (`at_send`: the run's name, the channels, the hyperparameters naming its code).

    A bridge builds its SDK object before the run has a name; any other difference is a field that names the
    run (or changes by itself) but was set then, and the bridge would send a stale value, so it stops."""
    differ = [
        path
        for path in dict.fromkeys([*leaves(built), *leaves(run)])
        if not any(path[: len(p)] == p for p in at_send) and value_at(built, path) != value_at(run, path)
    ]
    if differ:
        raise EngineError(
            f"the {bridge} set {', '.join(dotted(p) for p in differ)} when it was built, but the run's own request "
            "has another value there: the bridge must take it when it sends the request, as it does its run's name"
        )


def session_arguments(job: JobSpec, boto_session: boto3.Session | None) -> dict[str, Any]:
    """An SDK session (either major) that needs no STS call (explicit bucket) and sends no telemetry."""
    import boto3 as boto3_module

    boto = boto_session or boto3_module.Session(region_name=section(job).region)
    bucket = (output_uri(job) or "").removeprefix("s3://").split("/", 1)[0]
    return {"boto_session": boto, "default_bucket": bucket, "sagemaker_config": TELEMETRY_OFF}


def installed_sdk_text() -> str:
    """Which SageMaker Python SDK is installed, for a bridge's error ("SDK 3.27.0 is installed")."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"SDK {version('sagemaker')} is installed"
    except PackageNotFoundError:
        return "no SageMaker Python SDK is installed"


T = TypeVar("T")

CREDENTIALS_HINT = (
    "give AWS credentials as the SDK reads them: AWS_PROFILE (after `aws configure` or `aws sso login`), "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or boto_session=boto3.Session(...) to this call"
)


def without_credentials_said(build: Callable[[], T]) -> T:
    """`build()`, with botocore's bare NoCredentialsError (raised deep in the SDK's role and session checks)
    turned into an error that says what is missing and how to give it."""
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    try:
        return build()
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise EngineError(
            f"the SageMaker SDK needs AWS credentials to build this object and found none ({exc})",
            hint=CREDENTIALS_HINT,
        ) from None
