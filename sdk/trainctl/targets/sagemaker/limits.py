"""CreateTrainingJob's limits, from SageMaker's own service model, checked before anything is sent. Pure.

Every number and pattern below is the one in botocore's `sagemaker` service model (shape names in the
comments, CreateTrainingJobRequest's members). They are constants, not read at run time, so render needs
no botocore; tests/sagemaker/test_service_limits.py reads the model and fails when one drifts, and runs
every rendered request through botocore's ParamValidator plus the model's lengths, patterns and sizes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

MAX_TAGS = 50  # TagList max
TAG_KEY_MAX = 128  # TagKey max (min 1)
TAG_VALUE_MAX = 256  # TagValue max
TAG_SYMBOLS = "_.:/=+-@"  # TagKey/TagValue pattern ([\p{L}\p{Z}\p{N}_.:/=+\-@]*): letters, spaces, digits and these
MAX_CHANNELS = 20  # InputDataConfig max
CHANNEL_NAME_MAX = 64  # ChannelName max
CHANNEL_NAME = re.compile(r"[A-Za-z0-9\.\-_]+")  # ChannelName pattern
MAX_HYPERPARAMETERS = 100  # HyperParameters max
HYPERPARAMETER_KEY_MAX = 256  # HyperParameterKey max
HYPERPARAMETER_VALUE_MAX = 2500  # HyperParameterValue max
MAX_SUBNETS = 16  # Subnets max
MAX_SECURITY_GROUPS = 5  # VpcSecurityGroupIds max
VPC_ID_MAX = 32  # SubnetId, SecurityGroupId max
VPC_ID = re.compile(r"[-0-9a-zA-Z]+")  # SubnetId, SecurityGroupId pattern
IMAGE_MAX = 255  # AlgorithmImage max
S3_URI_MAX = 1024  # S3Uri max
MAX_ENVIRONMENT = 100  # TrainingEnvironmentMap max
ENVIRONMENT_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # TrainingEnvironmentKey pattern
ENVIRONMENT_KEY_MAX = 512  # TrainingEnvironmentKey max
ENVIRONMENT_VALUE_MAX = 512  # TrainingEnvironmentValue max
KMS_KEY_MAX = 2048  # KmsKeyId max
KMS_KEY = re.compile(r"[a-zA-Z0-9:/_-]*")  # KmsKeyId pattern
MAX_INSTANCE_GROUPS = 5  # InstanceGroups max
INSTANCE_GROUP_NAME_MAX = 64  # InstanceGroupName max (min 1)
KEEP_ALIVE_MAX_S = 21600  # KeepAlivePeriodInSeconds max
MAX_PENDING_MIN_S = 1800  # MaxPendingTimeInSeconds min
MAX_PENDING_MAX_S = 2419200  # MaxPendingTimeInSeconds max
MAX_RETRY_ATTEMPTS = 30  # MaximumRetryAttempts max (min 1)
RESERVED_TAG_PREFIX = "aws:"  # tag keys AWS keeps for itself (Tagging best practices; not in the model)


def _tag_text_ok(text: str) -> bool:
    """The TagKey/TagValue pattern: Unicode letters (L*), separators (Z*), numbers (N*) and TAG_SYMBOLS."""
    return all(c in TAG_SYMBOLS or unicodedata.category(c)[0] in "LZN" for c in text)


def tag_problems(tags: Mapping[str, str], added: int) -> list[str]:
    """sagemaker.tags against TagList / TagKey / TagValue; `added` tags trainctl puts beside them."""
    problems: list[str] = []
    if len(tags) + added > MAX_TAGS:
        problems.append(
            f"sagemaker.tags: {len(tags)} tags; SageMaker allows {MAX_TAGS} per training job and trainctl adds "
            f"{added} (trainctl:job), so at most {MAX_TAGS - added}"
        )
    for key, value in tags.items():
        if not 1 <= len(key) <= TAG_KEY_MAX:
            problems.append(f"sagemaker.tags: key {key[:40]!r}: {len(key)} characters; 1 to {TAG_KEY_MAX} allowed")
        if len(value) > TAG_VALUE_MAX:
            problems.append(f"sagemaker.tags.{key}: value of {len(value)} characters; at most {TAG_VALUE_MAX}")
        if key.lower().startswith(RESERVED_TAG_PREFIX):
            problems.append(f"sagemaker.tags: key {key!r}: the aws: prefix is reserved for AWS")
        for what, text in (("key", key), ("value", value)):
            if not _tag_text_ok(text):
                bad = "".join(sorted({c for c in text if not _tag_text_ok(c)}))
                problems.append(
                    f"sagemaker.tags: {what} {text[:40]!r} has {bad!r}; allowed are letters, digits, spaces "
                    f"and {TAG_SYMBOLS}"
                )
    return problems


def s3_length_problem(field: str, uri: str | None) -> list[str]:
    if uri is not None and len(uri) > S3_URI_MAX:
        return [f"{field}: {len(uri)} characters; SageMaker allows S3 URIs of at most {S3_URI_MAX}"]
    return []


def channel_problems(names: list[str]) -> list[str]:
    problems: list[str] = []
    if len(names) > MAX_CHANNELS:
        problems.append(f"data: {len(names)} input channels; SageMaker allows at most {MAX_CHANNELS}")
    for name in names:
        if len(name) > CHANNEL_NAME_MAX or not CHANNEL_NAME.fullmatch(name):
            problems.append(f"data.{name}: SageMaker channel names are 1 to {CHANNEL_NAME_MAX} of A-Z a-z 0-9 . - _")
    return problems


def vpc_problems(subnets: list[str], security_groups: list[str]) -> list[str]:
    problems: list[str] = []
    for field, ids, most in (
        ("sagemaker.subnets", subnets, MAX_SUBNETS),
        ("sagemaker.security_group_ids", security_groups, MAX_SECURITY_GROUPS),
    ):
        if len(ids) > most:
            problems.append(f"{field}: {len(ids)} given; SageMaker allows at most {most}")
        for one in ids:
            if len(one) > VPC_ID_MAX or not VPC_ID.fullmatch(one):
                problems.append(f"{field}: {one!r} is not an id (at most {VPC_ID_MAX} of - 0-9 a-z A-Z)")
    return problems


def environment_problems(env: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    if len(env) > MAX_ENVIRONMENT:
        problems.append(f"env: SageMaker allows at most {MAX_ENVIRONMENT} environment variables (secrets count too)")
    for key, value in env.items():
        if len(key) > ENVIRONMENT_KEY_MAX or not ENVIRONMENT_KEY.fullmatch(key):
            problems.append(f"env.{key}: SageMaker needs names of [a-zA-Z_][a-zA-Z0-9_]*")
        if len(value) > ENVIRONMENT_VALUE_MAX:
            problems.append(
                f"env.{key}: {len(value)} characters; SageMaker allows at most {ENVIRONMENT_VALUE_MAX} per value"
            )
    return problems


def kms_problems(field: str, key: str | None) -> list[str]:
    if key is None or (len(key) <= KMS_KEY_MAX and KMS_KEY.fullmatch(key)):
        return []
    return [f"{field}: {key[:60]!r} is not a KMS key id, alias or ARN (A-Z a-z 0-9 : / _ -)"]


def hyperparameter_problems(hyperparameters: Mapping[str, str], field_of: Any) -> list[str]:
    """HyperParameters: at most 100, keys up to 256, values up to 2500 characters (`field_of(key)` names it)."""
    problems: list[str] = []
    if len(hyperparameters) > MAX_HYPERPARAMETERS:
        problems.append(
            f"{field_of(None)}: {len(hyperparameters)} hyperparameters; SageMaker allows at most {MAX_HYPERPARAMETERS}"
        )
    for key, value in hyperparameters.items():
        if len(key) > HYPERPARAMETER_KEY_MAX:
            problems.append(
                f"{field_of(key)}: the name is {len(key)} characters; SageMaker allows {HYPERPARAMETER_KEY_MAX}"
            )
        if len(value) > HYPERPARAMETER_VALUE_MAX:
            problems.append(
                f"{field_of(key)}: encoded as a hyperparameter it is {len(value)} characters; "
                f"SageMaker allows {HYPERPARAMETER_VALUE_MAX}"
            )
    return problems
