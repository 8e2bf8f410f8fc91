"""Where artifact bytes physically live: a local directory, or any fsspec filesystem.

Both backends expose the same few operations on relative paths ("objects/ab/cdef...").
Writes are atomic: bytes go to a temporary name first and are renamed into place only
when complete, so a reader never sees half an artifact, and a crash leaves at most a
stray temporary file (never a wrong object under a content address).

s3:// URLs get their own backend (s3.py): object stores commit an upload whole, so it
writes to the final key and verifies the hash instead of renaming.

A remote store (anything but a local directory) materializes checkpoints in a read-through
cache under EVOTRAINER_HOME/cache/checkouts, re-hashed on every use (store.checkout).

Run `pytest tests/artifacts` to exercise both (fsspec through its `memory://` filesystem).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any


class LocalBackend:
    """A directory on a local filesystem; the default."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        self.location = str(self.root)

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def local_path(self, rel: str) -> Path:
        return self._path(rel)

    def checkout_root(self) -> Path:
        """Where directory artifacts are materialized: beside the objects."""
        return self.root / "checkouts"

    def exists(self, rel: str) -> bool:
        return self._path(rel).is_file()

    def size(self, rel: str) -> int:
        return self._path(rel).stat().st_size

    def open_read(self, rel: str) -> IO[bytes]:
        """The object's bytes; FileNotFoundError when it is not there."""
        return self._path(rel).open("rb")

    def write_atomic(self, rel: str, chunks: Iterable[bytes]) -> None:
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # The temporary file sits in the destination's directory so the rename never crosses
        # filesystems (os.replace is atomic only within one).
        tmp = dest.parent / f".tmp-{dest.name}-{secrets.token_hex(6)}"
        try:
            with tmp.open("wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        # fsync the directory too, or the rename itself may be lost on power failure.
        dir_fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def write_hashed(self, rel: str, data: bytes) -> None:
        """Store bytes whose hash the caller computed from this very object."""
        self.write_atomic(rel, [data])

    def move_in(self, src: Path, rel: str) -> None:
        """Move a finished temporary file (already fsynced) into place atomically."""
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)

    def tmp_path(self) -> Path:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        return tmp_dir / f"upload-{secrets.token_hex(8)}"

    def remove(self, rel: str) -> None:
        self._path(rel).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )

    def rmtree(self, rel: str) -> None:
        shutil.rmtree(self._path(rel), ignore_errors=True)


class FsspecBackend:
    """Any fsspec URL (s3://, gs://, memory://, ...). fsspec is imported only when used."""

    def __init__(self, url: str) -> None:
        import fsspec

        fs: Any
        fs, root = fsspec.core.url_to_fs(url)
        self.fs = fs
        self.root = root.rstrip("/")
        self.location = url

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def local_path(self, rel: str) -> None:
        return None

    def checkout_root(self) -> Path:
        """The read-through cache of this host: checkpoints are loaded from local files.
        Content-addressed, so one cache serves every store (and every bucket)."""
        from evotrainer.config import home

        return home() / "cache" / "checkouts"

    def exists(self, rel: str) -> bool:
        return bool(self.fs.isfile(self._path(rel)))

    def size(self, rel: str) -> int:
        return int(self.fs.size(self._path(rel)))

    def open_read(self, rel: str) -> IO[bytes]:
        f: IO[bytes] = self.fs.open(self._path(rel), "rb")
        return f

    def write_atomic(self, rel: str, chunks: Iterable[bytes]) -> None:
        dest = self._path(rel)
        tmp = f"{self.root}/tmp/upload-{secrets.token_hex(8)}"
        self.fs.makedirs(dest.rsplit("/", 1)[0], exist_ok=True)
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        with self.fs.open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        # Object stores have no atomic rename; a copy-then-delete still never exposes a
        # partial object under the final name, which is what readers rely on.
        self.fs.mv(tmp, dest)

    def write_hashed(self, rel: str, data: bytes) -> None:
        """Store bytes whose hash the caller computed from this very object."""
        self.write_atomic(rel, [data])

    def remove(self, rel: str) -> None:
        if self.fs.exists(self._path(rel)):
            self.fs.rm(self._path(rel))

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not self.fs.exists(base):
            return []
        # fsspec may or may not keep a leading "/" in what it returns; compare without it.
        root = self.root.lstrip("/") + "/"
        found = (p.lstrip("/") for p in self.fs.find(base))
        return sorted(p[len(root) :] for p in found if p.startswith(root))

    def rmtree(self, rel: str) -> None:
        if self.fs.exists(self._path(rel)):
            self.fs.rm(self._path(rel), recursive=True)


Backend = LocalBackend | FsspecBackend


def backend_for(location: str) -> Backend:
    """A plain path (or file:// URL) is a local directory; s3:// goes to the S3 backend,
    any other URL to fsspec."""
    if location.startswith("s3://"):
        from evotrainer.artifacts.s3 import S3Backend

        return S3Backend(location)
    if location.startswith("file://"):
        return LocalBackend(location[len("file://") :])
    if "://" in location:
        return FsspecBackend(location)
    return LocalBackend(location)
