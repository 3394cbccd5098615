"""Resolve `TRAINCTL_SECRET_<ENV>=<secret id>[#key]` from AWS Secrets Manager into `<ENV>`.

The SDK never puts a secret's value into a SageMaker request (it would show in DescribeTrainingJob);
it passes the Secrets Manager name or ARN instead, and the launcher reads the value here, with the
job's execution role, before torchrun starts, so every worker inherits `<ENV>`. Values are never
printed: every message names only the variable, the secret id and the JSON key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..errors import TrainerInputError

PREFIX = "TRAINCTL_SECRET_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARN_REGION = re.compile(r"^arn:[^:]+:secretsmanager:([a-z0-9-]+):")


@dataclass(frozen=True)
class SecretRef:
    """One requested secret: export `env` from Secrets Manager `secret_id` (JSON key `key`, if set)."""

    env: str
    secret_id: str
    key: str | None = None

    @property
    def where(self) -> str:
        return self.secret_id + (f"#{self.key}" if self.key else "")


def requested(environ: Mapping[str, str]) -> list[SecretRef]:
    """The `TRAINCTL_SECRET_*` requests in `environ`, sorted by variable name."""
    refs: list[SecretRef] = []
    for name in sorted(environ):
        if not name.startswith(PREFIX):
            continue
        env = name[len(PREFIX) :]
        if not _ENV_NAME.match(env):
            raise TrainerInputError(f"{name}: {env!r} is not a valid environment variable name")
        secret_id, sep, key = environ[name].strip().partition("#")
        if not secret_id or (sep and not key):
            raise TrainerInputError(f"{name}: expected '<secret name or ARN>[#<json key>]'")
        refs.append(SecretRef(env=env, secret_id=secret_id, key=key or None))
    return refs


def describe(refs: list[SecretRef]) -> list[dict[str, str | None]]:
    """What `--dry-run` prints: names and ids only (nothing is fetched)."""
    return [{"env": r.env, "secret_id": r.secret_id, "key": r.key} for r in refs]


def _region(secret_id: str) -> str | None:
    """An ARN carries its region; for a bare name boto3's default (AWS_REGION, config) applies."""
    match = _ARN_REGION.match(secret_id)
    return match.group(1) if match else None


def _explain(ref: SecretRef, code: str, message: str, status: int) -> str:
    head = f"secret for {ref.env} ({ref.secret_id})"
    if code == "ResourceNotFoundException":
        return f"{head}: not found in Secrets Manager; check the name or ARN and the region"
    # by HTTP status too: a 403 whose body botocore cannot parse still means "not allowed"
    if code in ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException") or status == 403:
        return f"{head}: access denied; the job's execution role needs secretsmanager:GetSecretValue on {ref.secret_id}"
    if code == "DecryptionFailure":
        return f"{head}: cannot decrypt; the execution role needs kms:Decrypt on the secret's KMS key"
    # AWS error messages describe the request, never the secret's value
    return f"{head}: {code}: {message}"


def _value(ref: SecretRef, response: Mapping[str, Any]) -> str:
    text = response.get("SecretString")
    if text is None:
        binary = response.get("SecretBinary")
        try:
            text = bytes(binary).decode("utf-8") if binary is not None else None
        except (TypeError, UnicodeDecodeError):
            text = None
    if text is None:
        raise TrainerInputError(f"secret for {ref.env} ({ref.secret_id}): has no text value")
    if ref.key is None:
        return str(text)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise TrainerInputError(
            f"secret for {ref.env} ({ref.secret_id}): #{ref.key} needs a JSON object secret, and this one is not"
        )
    if ref.key not in data:
        raise TrainerInputError(f"secret for {ref.env} ({ref.secret_id}): the JSON secret has no key {ref.key!r}")
    item = data[ref.key]
    return item if isinstance(item, str) else json.dumps(item)


def fetch(refs: list[SecretRef]) -> dict[str, str]:
    """`{ENV: value}` for every request; the first failure raises, naming variable and id only."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        names = ", ".join(PREFIX + r.env for r in refs)
        raise TrainerInputError(
            f"{names} asks for AWS Secrets Manager, but boto3 is not installed in this image "
            "(the trainer image carries it; a custom image needs `pip install boto3`)"
        ) from exc
    clients: dict[str | None, Any] = {}
    values: dict[str, str] = {}
    for ref in refs:
        region = _region(ref.secret_id)
        try:
            if region not in clients:
                clients[region] = boto3.session.Session().client("secretsmanager", region_name=region)
            response = clients[region].get_secret_value(SecretId=ref.secret_id)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            text = _explain(ref, str(error.get("Code", "")), str(error.get("Message", "")), status)
            raise TrainerInputError(text) from None
        except BotoCoreError as exc:
            # no credentials, no region, endpoint unreachable: botocore's text names none of the value
            raise TrainerInputError(f"secret for {ref.env} ({ref.secret_id}): {exc}") from None
        values[ref.env] = _value(ref, response)
    return values


def export(environ: MutableMapping[str, str]) -> list[str]:
    """Resolve every `TRAINCTL_SECRET_*` in `environ` into `<ENV>` and drop the request variables.

    All or nothing: if one secret fails, `environ` is left as it was. Returns the exported names.
    """
    refs = requested(environ)
    if not refs:
        return []
    values = fetch(refs)
    for ref in refs:
        del environ[PREFIX + ref.env]
    environ.update(values)
    return [r.env for r in refs]
