"""Tables, checkpoints and the registry on any filesystem: a local path, a ``file://`` URI or an
object store (``s3a://bucket/key``, Hadoop's scheme, which Spark uses), through ``pyarrow.fs``, so
every reader outside Spark (the checkpoint reader, the gate's paths, the kubernetes runner's
catch-up) treats them alike.

Example::

    fs, path = filesystem("s3a://lake/checkpoints/flights/v2/offsets", settings)
    names = list_names("file:///tmp/kappa/checkpoints/flights/v2/commits")   # ['0', '1', …]
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from kappa.config import Settings


def local_path(location: str | Path) -> Path | None:
    """The local path of a plain path or a ``file://`` URI; None for an object-store URI."""
    text = str(location)
    if text.startswith("file://"):
        return Path(urlparse(text).path)
    if "://" in text:
        return None
    return Path(text)


def delta_rs_uri(location: str | Path) -> str:
    """``location`` as delta-rs names it: Hadoop's ``s3a://`` scheme (which Spark uses) is
    ``s3://`` there; delta-rs reads the ``AWS_*`` credentials itself. Other locations unchanged."""
    return re.sub(r"^s3a://", "s3://", str(location))


def delta_rs_options(location: str | Path, settings: Settings | None = None) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for ``location``, THE options of every Kappa delta-rs reader and
    writer: on an object store (``s3://``/``s3a://``), commits as conditional puts
    (``conditional_put=etag``: each ``_delta_log/<version>.json`` is a PutObject with
    ``If-None-Match: *``, which the store refuses with 412 when another writer took that version;
    delta-rs then retries at the next one), so the registry, declarations and forget log, written by
    the CLI, Dagster and every gate application, lose no commit (tests/integration/
    test_concurrent_writers.py). It is delta-rs 1.x's default (disabled, delta-rs refuses to commit:
    it has no unconditional mode left); Kappa sets it so that an ``AWS_CONDITIONAL_PUT`` in the
    environment cannot change it. With an endpoint of its own
    (``KAPPA_S3_ENDPOINT``, e.g. ``kappa objectstore``): that endpoint, path-style addressing when
    ``KAPPA_S3_PATH_STYLE_ACCESS``, and plain HTTP allowed for an ``http://`` endpoint (delta-rs
    refuses it otherwise). None for any other location. Credentials always come from the ``AWS_*``
    environment."""
    if not re.match(r"^s3a?://", str(location)):
        return None
    options = {"conditional_put": "etag"}
    if settings is not None and settings.s3_endpoint:
        options["AWS_ENDPOINT_URL"] = settings.s3_endpoint
        if settings.s3_path_style_access:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if settings.s3_endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    return options


def filesystem(location: str | Path, settings: Settings | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for ``location``. ``s3a://`` and ``s3://`` go to
    ``pyarrow.fs.S3FileSystem`` with the object store's endpoint from ``settings`` (``KAPPA_S3_ENDPOINT``;
    credentials from the ``AWS_*`` variables, as Spark reads them)."""
    local = local_path(location)
    if local is not None:
        return pafs.LocalFileSystem(), str(local)
    text = delta_rs_uri(location)
    if text.startswith("s3://"):
        kwargs: dict = {}
        endpoint = settings.s3_endpoint if settings is not None else None
        if endpoint:
            parsed = urlparse(endpoint)
            kwargs["endpoint_override"] = parsed.netloc or parsed.path
            kwargs["scheme"] = parsed.scheme or "https"
        return pafs.S3FileSystem(**kwargs), text[len("s3://"):]
    return pafs.FileSystem.from_uri(text)


def exists(location: str | Path, settings: Settings | None = None) -> bool:
    """Whether a file or folder is at ``location`` (a path or URI, as :func:`filesystem` takes
    it). On an object store a "folder" exists when some key has it as a prefix."""
    fs, path = filesystem(location, settings)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def list_names(location: str | Path, settings: Settings | None = None) -> list[str]:
    """Base names of the entries of a folder ([] when it does not exist)."""
    fs, path = filesystem(location, settings)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    return [info.base_name for info in fs.get_file_info(pafs.FileSelector(path))]


def read_text(location: str | Path, settings: Settings | None = None) -> str:
    """The whole file at ``location`` decoded as UTF-8 (meant for small files: checkpoint offsets
    and commits). Raises ``OSError`` when it cannot be read (``FileNotFoundError`` for a missing
    local file), ``UnicodeDecodeError`` when it is not UTF-8."""
    fs, path = filesystem(location, settings)
    with fs.open_input_stream(path) as f:
        return f.read().decode("utf-8")


def mtime(location: str | Path, settings: Settings | None = None) -> float | None:
    """Modification time (epoch seconds) of a file, None if unknown or missing."""
    fs, path = filesystem(location, settings)
    info = fs.get_file_info(path)
    return None if info.mtime is None else info.mtime.timestamp()


def delete_tree(location: str | Path, settings: Settings | None = None) -> int:
    """Delete the folder at ``location`` and everything under it; returns how many files it held
    (0, and nothing done, when there is no such folder). On an object store the files go first,
    then the folder markers deepest first: ``pyarrow.fs``'s ``delete_dir`` sends them in one
    DeleteObjects batch, and a server that keeps folders (versitygw's POSIX backend) refuses a
    marker whose folder still holds a file of that same batch ("Directory object not empty")."""
    fs, path = filesystem(location, settings)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return 0
    if isinstance(fs, pafs.LocalFileSystem):
        files = sum(1 for i in fs.get_file_info(pafs.FileSelector(path, recursive=True)) if i.type == pafs.FileType.File)
        fs.delete_dir(path)
        return files
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = [i.path for i in infos if i.type == pafs.FileType.File]
    for f in files:
        fs.delete_file(f)
    for d in sorted((i.path for i in infos if i.type == pafs.FileType.Directory), key=lambda p: -p.count("/")):
        if fs.get_file_info(d).type == pafs.FileType.Directory:
            fs.delete_dir(d)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)
    return len(files)


def delete_file(location: str | Path, settings: Settings | None = None) -> bool:
    """Delete the one file at ``location`` (a path or URI, as :func:`filesystem` takes it); False,
    and nothing done, when there is none."""
    fs, path = filesystem(location, settings)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return False
    fs.delete_file(path)
    return True


def join(location: str | Path, *parts: str) -> str:
    """``location/part/…`` as a string, for a path or a URI."""
    return "/".join([str(location).rstrip("/"), *parts])
