"""The per-library object-store clients behind :class:`~megadump_zarr.store.object_backend.ObjectStoreBackend`.

``ObstoreS3Client`` (obstore's ``S3Store``, the default for ``s3://``) and ``FsspecClient`` (any fsspec file system:
s3fs, gcsfs, adlfs) offer the same small set of single requests (put, put_file, get, get_attributes, head,
list, delete) and ``kind(error)``, which classifies an error as one of :class:`FailureKind`; they do not retry
(the backend's one retry loop does). :func:`s3_config` translates s3fs-style ``storage_options`` for
obstore. See :mod:`megadump_zarr.store.object_backend` for why obstore is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
import os
from typing import Any

from megadump_zarr.store.backend import Buffer, as_bytes
from megadump_zarr.store.retry import TRANSIENT_CODES, RetryPolicy, FailureKind, status_kind

__all__ = ["S3_SCHEMES", "ObjectInfo", "s3_config"]

S3_SCHEMES = frozenset({"s3", "s3a"})
"""The URL schemes of S3 (what :func:`s3_config` configures)."""

_SINGLE_PUT_LIMIT = 64 << 20  # larger objects go up in parts (S3's single PUT limit is 5 GiB)
PART_BYTES = 16 << 20
# obstore/reqwest texts of errors in the configuration, not the network (retrying cannot help)
_CONFIG_ERRORS = (
    "builder error",
    "Missing region",
    "Missing bucket",
    "Unknown configuration key",
    "Configuration key",
    "Unable to parse",
    "Invalid URL",
    "relative URL without a base",
    "credential provider",
    "Failed to get credentials",
)


# ------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or ``HEAD`` says about one object.

    Args:
        key: Key relative to the backend root.
        size: Bytes.
        etag: The ETag without quotes (S3: the content MD5 for single-part uploads, ``md5-of-md5s-N``
            for multipart ones), or ``None``.
    """

    key: str
    size: int
    etag: str | None


def _etag(value: Any) -> str | None:
    return str(value).strip('"') if value else None


# ------------------------------------------------------------------------------------------- clients
class ObstoreS3Client:
    """obstore's ``S3Store`` (one bucket); paths are full keys inside the bucket."""

    name = "obstore"

    def __init__(
        self,
        bucket: str,
        config: dict[str, Any],
        client_options: dict[str, Any],
        credential_provider: Any,
        policy: RetryPolicy,
    ) -> None:
        import obstore
        from obstore.store import S3Store

        self._obs = obstore
        options = {
            "timeout": timedelta(seconds=policy.timeout),
            "connect_timeout": timedelta(seconds=min(policy.timeout, 10.0)),
            **client_options,
        }
        self.store = S3Store(
            bucket,
            config=config,
            client_options=options,
            retry_config={"max_retries": 0},
            credential_provider=credential_provider,
        )

    def put(
        self, path: str, data: Buffer, *, create: bool = False, attributes: Mapping[str, str] | None = None
    ) -> None:
        size = memoryview(data).nbytes
        kwargs: dict[str, Any] = {"attributes": dict(attributes)} if attributes else {}
        if create:
            kwargs["mode"] = "create"
        if size <= _SINGLE_PUT_LIMIT or create:
            self._obs.put(self.store, path, data, use_multipart=False, **kwargs)
        else:
            self._obs.put(
                self.store, path, data, use_multipart=True, chunk_size=PART_BYTES, max_concurrency=4, **kwargs
            )

    def put_file(self, path: str, file: str, part_bytes: int, attributes: Mapping[str, str] | None) -> None:
        from pathlib import Path

        kwargs: dict[str, Any] = {"attributes": dict(attributes)} if attributes else {}
        self._obs.put(
            self.store, path, Path(file), use_multipart=True, chunk_size=part_bytes, max_concurrency=4, **kwargs
        )

    def get(self, path: str) -> bytes:
        return bytes(self._obs.get(self.store, path).bytes())

    def get_attributes(self, path: str) -> dict[str, str]:
        result = self._obs.get(self.store, path, options={"head": True})
        return {str(k): str(v) for k, v in (result.attributes or {}).items()}

    def head(self, path: str) -> ObjectInfo:
        meta = self._obs.head(self.store, path)
        return ObjectInfo(path, int(meta["size"]), _etag(meta.get("e_tag")))

    def list(self, prefix: str) -> list[ObjectInfo]:
        found = []
        for batch in self._obs.list(self.store, prefix):
            for meta in batch:
                found.append(ObjectInfo(meta["path"], int(meta["size"]), _etag(meta.get("e_tag"))))
        return found

    def delete(self, paths: Sequence[str]) -> None:
        self._obs.delete(self.store, list(paths))

    def kind(self, error: BaseException) -> str:
        from obstore import exceptions as ex

        if isinstance(error, (ex.AlreadyExistsError, ex.PreconditionError)):
            return FailureKind.EXISTS
        if isinstance(error, FileNotFoundError):
            return FailureKind.NOT_FOUND
        if isinstance(error, ex.NotSupportedError):
            return FailureKind.UNSUPPORTED
        if isinstance(
            error,
            (
                ex.PermissionDeniedError,
                ex.UnauthenticatedError,
                ex.InvalidPathError,
                ex.UnknownConfigurationKeyError,
                ValueError,
                TypeError,
            ),
        ):
            return FailureKind.PERMANENT
        text = str(error)
        if any(marker in text for marker in _CONFIG_ERRORS):
            return FailureKind.PERMANENT  # a client that cannot be built or configured never gets better by retrying
        by_status = status_kind(text)
        if by_status is not None:
            return by_status
        return FailureKind.TRANSIENT  # no HTTP status: connection refused/reset/closed, timeouts, DNS hiccups


class FsspecClient:
    """Any fsspec file system (s3fs, gcsfs, adlfs); paths are ``bucket/key`` strings."""

    name = "fsspec"

    def __init__(self, url: str, storage_options: Mapping[str, Any]) -> None:
        import fsspec.core

        self.fs, _ = fsspec.core.url_to_fs(url, **dict(storage_options))
        self._s3 = type(self.fs).__module__.startswith("s3fs")

    def put(
        self, path: str, data: Buffer, *, create: bool = False, attributes: Mapping[str, str] | None = None
    ) -> None:
        kwargs: dict[str, Any] = {}
        if create:
            kwargs["mode"] = "create"
        if attributes and self._s3:
            kwargs["Metadata"] = dict(attributes)
        payload = as_bytes(data)
        try:
            self.fs.pipe_file(path, payload, **kwargs)
        except TypeError:  # a file system without mode= / metadata: plain overwrite
            if create:
                raise NotImplementedError("conditional put") from None
            self.fs.pipe_file(path, payload)

    def put_file(self, path: str, file: str, part_bytes: int, attributes: Mapping[str, str] | None) -> None:
        kwargs: dict[str, Any] = {"Metadata": dict(attributes)} if attributes and self._s3 else {}
        self.fs.put_file(file, path, chunksize=part_bytes, **kwargs)

    def get(self, path: str) -> bytes:
        return bytes(self.fs.cat_file(path))

    def get_attributes(self, path: str) -> dict[str, str]:
        if self._s3:
            return {str(k): str(v) for k, v in (self.fs.metadata(path) or {}).items()}
        return {}

    def head(self, path: str) -> ObjectInfo:
        info = self.fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(path)
        return ObjectInfo(path, int(info.get("size") or 0), _etag(info.get("ETag") or info.get("etag")))

    def list(self, prefix: str) -> list[ObjectInfo]:
        try:
            found = self.fs.find(prefix, detail=True, withdirs=False)
        except FileNotFoundError:
            return []
        return [ObjectInfo(p, int(i.get("size") or 0), _etag(i.get("ETag") or i.get("etag"))) for p, i in found.items()]

    def delete(self, paths: Sequence[str]) -> None:
        self.fs.rm(list(paths))

    def kind(self, error: BaseException) -> str:
        if isinstance(error, (FileExistsError,)):
            return FailureKind.EXISTS
        if isinstance(error, FileNotFoundError):
            return FailureKind.NOT_FOUND
        if isinstance(error, NotImplementedError):
            return FailureKind.UNSUPPORTED
        if isinstance(error, (PermissionError, ValueError, TypeError, KeyError)):
            return FailureKind.PERMANENT
        response = getattr(error, "response", None)
        if isinstance(response, Mapping):  # botocore ClientError
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if any(c in code for c in TRANSIENT_CODES) or (isinstance(status, int) and status >= 500):
                return FailureKind.TRANSIENT
            if code in ("PreconditionFailed",) or status == 412:
                return FailureKind.EXISTS
            if isinstance(status, int) and 400 <= status < 500:
                return FailureKind.PERMANENT
        status = getattr(error, "code", None) or getattr(error, "status", None) or getattr(error, "status_code", None)
        if isinstance(status, int) and 400 <= status < 600:
            return status_kind(f"status code {status} {error}") or FailureKind.PERMANENT
        return status_kind(str(error)) or FailureKind.TRANSIENT


# ------------------------------------------------------------------------------------------- options
class _BotocoreCredentials:
    """obstore credential provider backed by botocore's credential chain (profiles, SSO, config files)."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> dict[str, Any]:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(timezone.utc) + timedelta(minutes=10),
        }

    def __repr__(self) -> str:
        return "<botocore credentials>"


def s3_config(storage_options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], Any] | None:
    """Translate s3fs-style ``storage_options`` into obstore's ``(S3Config, ClientConfig, credential provider)``.

    Understood: ``key``/``aws_access_key_id``, ``secret``/``aws_secret_access_key``, ``token``/
    ``aws_session_token``, ``endpoint_url`` (top level or in ``client_kwargs``), ``region_name``
    (``client_kwargs``) / ``region``, ``anon``, ``use_ssl``, ``profile``, ``requester_pays``,
    ``client_kwargs.verify`` (False), ``config_kwargs.connect_timeout``/``read_timeout``,
    ``s3_additional_kwargs.ServerSideEncryption``/``SSEKMSKeyId``. Without explicit keys, the environment's
    ``AWS_*`` variables are used, else botocore's credential chain (profiles, SSO, instance roles).

    Args:
        storage_options: The options (as s3fs takes them).

    Returns:
        The obstore configuration, or ``None`` when some option has no obstore equivalent (the caller then
        uses s3fs).
    """
    options = dict(storage_options or {})
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    config_kwargs = dict(options.pop("config_kwargs", None) or {})
    extra = dict(options.pop("s3_additional_kwargs", None) or {})
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    aliases = {
        "key": "access_key_id",
        "aws_access_key_id": "access_key_id",
        "secret": "secret_access_key",
        "aws_secret_access_key": "secret_access_key",
        "token": "session_token",
        "aws_session_token": "session_token",
        "region": "region",
        "region_name": "region",
        "endpoint_url": "endpoint",
    }
    profile = options.pop("profile", None)
    for name, value in options.items():
        if name in aliases:
            if value is not None:
                config[aliases[name]] = value
        elif name == "anon":
            if value:
                config["skip_signature"] = True
        elif name == "use_ssl":
            if value is False:
                client["allow_http"] = True
        elif name == "requester_pays":
            if value:
                config["request_payer"] = True
        elif name in (
            "default_block_size",
            "default_fill_cache",
            "default_cache_type",
            "cache_regions",
            "use_listings_cache",
            "listings_expiry_time",
            "max_paths",
            "skip_instance_cache",
            "asynchronous",
            "loop",
            "max_concurrency",
            "version_aware",
            "fixed_upload_size",
        ):
            continue  # fsspec-side tuning without meaning for single requests
        else:
            return None
    for name, value in client_kwargs.items():
        if name == "endpoint_url" and value:
            config["endpoint"] = value
        elif name == "region_name" and value:
            config["region"] = value
        elif name == "verify" and value is False:
            client["allow_invalid_certificates"] = True
        elif name in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token") and value:
            config[aliases[name]] = value
        else:
            return None
    for name, value in config_kwargs.items():
        if name in ("connect_timeout", "read_timeout"):
            client["connect_timeout" if name == "connect_timeout" else "timeout"] = timedelta(seconds=float(value))
        elif name in ("retries", "max_pool_connections", "signature_version", "s3"):
            if name == "s3" and isinstance(value, Mapping) and value.get("addressing_style") == "virtual":
                config["virtual_hosted_style_request"] = True
            continue
        else:
            return None
    for name, value in extra.items():
        if name == "ServerSideEncryption":
            config["server_side_encryption"] = value
        elif name == "SSEKMSKeyId":
            config["sse_kms_key_id"] = value
        else:
            return None
    provider = _aws_environment(config, client, profile)
    return config, client, provider


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _aws_environment(config: dict[str, Any], client: dict[str, Any], profile: str | None) -> Any:
    """Fill what ``storage_options`` left open the way the AWS CLI does; return the credential provider.

    Options win over the environment, the environment over the profile's files. Endpoint:
    ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's ``endpoint_url``; a plain ``http://``
    endpoint is allowed unless ``AWS_ALLOW_HTTP`` says false (and ``AWS_ALLOW_HTTP=true`` allows one
    anyway). Region: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's ``region``. Credentials:
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` (unless a ``profile`` option
    names a profile), else botocore's chain (``AWS_PROFILE``, ``AWS_SHARED_CREDENTIALS_FILE``,
    ``AWS_CONFIG_FILE``, SSO, container and instance roles).

    Raises:
        ValueError: A named profile that does not exist, no credentials anywhere, a plain-http endpoint
            with ``AWS_ALLOW_HTTP=false``, a malformed endpoint (one line, no secrets).
    """
    session = None
    has_keys = "access_key_id" in config or bool(config.get("skip_signature"))
    env_keys = _env("AWS_ACCESS_KEY_ID") and _env("AWS_SECRET_ACCESS_KEY")
    if not has_keys and env_keys and profile is None:
        config["access_key_id"] = os.environ["AWS_ACCESS_KEY_ID"]
        config["secret_access_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        token = _env("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
        if token:
            config["session_token"] = token
        has_keys = True
    if (
        not has_keys
        or profile is not None
        or ("region" not in config and not _env("AWS_REGION", "AWS_DEFAULT_REGION"))
        or ("endpoint" not in config and not _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"))
    ):
        session = _botocore_session(profile)  # the profile's files: region, endpoint_url, credentials
    if "endpoint" not in config:
        endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        if endpoint is None and session is not None:
            endpoint = session.get_scoped_config().get("endpoint_url") or None
        if endpoint:
            config["endpoint"] = endpoint
    if "region" not in config:
        region = _env("AWS_REGION", "AWS_DEFAULT_REGION")
        if region is None and session is not None:
            region = session.get_config_variable("region")
        if region:
            config["region"] = region
    endpoint = str(config.get("endpoint", ""))
    allow = (os.environ.get("AWS_ALLOW_HTTP") or "").strip().lower()
    if allow and allow not in _TRUE + _FALSE:
        raise ValueError(f"AWS_ALLOW_HTTP must be true or false, got {os.environ['AWS_ALLOW_HTTP']!r}")
    if endpoint:
        if (
            "://" not in endpoint
            or endpoint.split("://", 1)[0].lower() not in ("http", "https")
            or not endpoint.split("://", 1)[1].strip("/")
        ):
            raise ValueError(
                f"S3 endpoint {endpoint!r} is not an http(s):// URL (from storage options, "
                "AWS_ENDPOINT_URL or the profile's endpoint_url)"
            )
        config.setdefault("virtual_hosted_style_request", False)
    if endpoint.lower().startswith("http://"):
        if allow in _FALSE and client.get("allow_http") is not True:
            raise ValueError(f"S3 endpoint {endpoint} is plain HTTP but AWS_ALLOW_HTTP={os.environ['AWS_ALLOW_HTTP']}")
        client["allow_http"] = True
    elif allow in _TRUE:
        client["allow_http"] = True
    if has_keys:
        return None
    credentials = session.get_credentials() if session is not None else None
    if credentials is None:
        raise ValueError(
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE "
            "(with ~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE), or pass -S key=... -S secret=..., "
            "or -S anon=true for a public bucket"
        )
    return _BotocoreCredentials(credentials)


def _botocore_session(profile: str | None) -> Any:
    """A botocore session for ``profile`` (``None``: ``AWS_PROFILE`` or ``default``), checked to exist."""
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        session.get_scoped_config()
    except botocore.exceptions.ProfileNotFound:
        name = profile or _env("AWS_PROFILE", "AWS_DEFAULT_PROFILE")
        files = " or ".join(
            f
            for f in (
                os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
                os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
            )
        )
        raise ValueError(f"AWS profile {name!r} not found in {files}") from None
    except botocore.exceptions.BotoCoreError as error:  # unreadable config file, ...
        raise ValueError(f"AWS configuration error: {error}") from None
    return session
