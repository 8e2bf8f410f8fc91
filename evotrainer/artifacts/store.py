"""The content-addressed artifact store: checkpoints and rollout evidence, named by sha256.

An artifact id is the sha256 (64 lowercase hex characters) of its bytes. A directory
(a checkpoint) is stored as its member files plus a canonical JSON manifest listing
(path, size, sha256) sorted by path; the directory's id is the manifest's sha256, so it
is stable across machines, file orders and timestamps, and identical files are stored once.

Layout under the root (a directory or an fsspec URL, see `open_store`):
    objects/ab/cdef...   the bytes of artifact abcdef...
    refs/<name>          a cache pointer (e.g. the converted SmolLM2 checkpoint) to an id
    checkouts/<id>/      directory artifacts materialized for loading (a disposable cache)

    >>> store = open_store("/tmp/arts"); sha = store.put_bytes(b"hi"); store.verify(sha)
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, TypeVar

from evotrainer.artifacts.backends import Backend, LocalBackend, backend_for
from evotrainer.artifacts.errors import ArtifactCorruptError, ArtifactMissingError, InvalidArtifactIdError

_T = TypeVar("_T")
_R = TypeVar("_R")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
_IN_MEMORY = 64 << 20
"""A remote store uploads a file up to this size from memory, read once."""
MANIFEST_MARK = b'{"evotrainer_manifest":1,'
"""Every directory manifest starts with these bytes (canonical JSON, keys sorted, 'e' < 'f')."""


@dataclass(frozen=True)
class ArtifactInfo:
    """What the `artifacts` table records about one stored artifact."""

    sha256: str
    size: int
    """Bytes of the blob; for a directory, the total of its member files."""
    kind: Literal["blob", "dir"]
    files: int = 1


def is_artifact_id(text: object) -> bool:
    """A lowercase hex sha256: the only form an artifact id takes."""
    return isinstance(text, str) and _SHA_RE.match(text) is not None


def _check_id(sha256: str) -> str:
    if not is_artifact_id(sha256):
        raise InvalidArtifactIdError(str(sha256))
    return sha256


def _rel(sha256: str) -> str:
    return f"objects/{sha256[:2]}/{sha256[2:]}"


def manifest_bytes(entries: list[tuple[str, int, str]]) -> bytes:
    """The canonical manifest of a directory: (posix path, size, sha256) sorted by path."""
    files = [{"path": p, "sha256": h, "size": s} for p, s, h in sorted(entries)]
    return json.dumps({"evotrainer_manifest": 1, "files": files}, sort_keys=True, separators=(",", ":")).encode()


class ArtifactStore:
    """Put, get and verify artifacts by sha256. Thread-safe for concurrent puts of any id."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.location = backend.location

    @property
    def remote(self) -> bool:
        """Not a local directory: reading an object costs a network transfer."""
        return not isinstance(self.backend, LocalBackend)

    # ---- writing -------------------------------------------------------------------

    def put_bytes(self, data: bytes) -> str:
        """Store `data`; returns its sha256. Storing the same bytes twice is a no-op."""
        sha = hashlib.sha256(data).hexdigest()
        if not self.backend.exists(_rel(sha)):
            self.backend.write_hashed(_rel(sha), data)
        return sha

    def put_file(self, path: str | os.PathLike[str]) -> str:
        """Store one file's bytes, streaming (checkpoints can be large)."""
        path = Path(path)
        if isinstance(self.backend, LocalBackend):
            # Hash while copying into a temporary file, then rename by the hash: one read.
            tmp = self.backend.tmp_path()
            digest = hashlib.sha256()
            try:
                with path.open("rb") as src, tmp.open("wb") as dst:
                    for chunk in iter(lambda: src.read(_CHUNK), b""):
                        digest.update(chunk)
                        dst.write(chunk)
                    dst.flush()
                    os.fsync(dst.fileno())
                sha = digest.hexdigest()
                if not self.backend.exists(_rel(sha)):
                    self.backend.move_in(tmp, _rel(sha))
            finally:
                tmp.unlink(missing_ok=True)
            return sha
        if path.stat().st_size <= _IN_MEMORY:
            # One read: the bytes hashed are the bytes sent.
            return self.put_bytes(path.read_bytes())
        sha = _hash_file(path)
        if not self.backend.exists(_rel(sha)):
            # The file is read again as it is sent; the backend checks the bytes it sent
            # still hash to `sha` (S3) or renames them into place only when complete.
            self.backend.write_atomic(_rel(sha), _read_chunks(path))
        return sha

    def put_dir(self, path: str | os.PathLike[str]) -> str:
        """Store a directory tree (regular files only); returns the id of its manifest.

        Timestamps, permissions and empty directories are not part of the content, so the
        same files give the same id anywhere.
        """
        root = Path(path)
        if not root.is_dir():
            raise NotADirectoryError(root)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        hashes = self._transfer(self.put_file, files)
        entries = [(f.relative_to(root).as_posix(), f.stat().st_size, h) for f, h in zip(files, hashes, strict=True)]
        # Members first, manifest last: a manifest is never visible before its files.
        return self.put_bytes(manifest_bytes(entries))

    def set_ref(self, name: str, sha256: str) -> None:
        """Point a cache name at an artifact (refs are caches of deterministic work, not history)."""
        _check_id(sha256)
        self.backend.write_atomic(f"refs/{name}", [sha256.encode()])

    def get_ref(self, name: str) -> str | None:
        """The artifact a cache name points at, if the pointer and the artifact both exist."""
        if not self.backend.exists(f"refs/{name}"):
            return None
        with self.backend.open_read(f"refs/{name}") as f:
            sha = f.read().decode().strip()
        return sha if _SHA_RE.match(sha) and self.exists(sha) else None

    # ---- reading -------------------------------------------------------------------

    def exists(self, sha256: str) -> bool:
        return self.backend.exists(_rel(_check_id(sha256)))

    def open(self, sha256: str) -> IO[bytes]:
        """A binary file object on the artifact's bytes (not verified; use `get` or `check`)."""
        return self._open(_check_id(sha256))

    def _open(self, sha256: str) -> IO[bytes]:
        # No existence check first: on a remote store that is one more round trip per read.
        try:
            return self.backend.open_read(_rel(sha256))
        except FileNotFoundError:
            raise ArtifactMissingError(sha256, self.location) from None

    def get(self, sha256: str) -> bytes:
        """The artifact's bytes, verified against its id."""
        with self.open(sha256) as f:
            data = f.read()
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ArtifactCorruptError(sha256, actual, self.location)
        return data

    def is_dir(self, sha256: str) -> bool:
        """True when the artifact is a directory manifest (any other bytes are a blob)."""
        return self._members(sha256) is not None

    def _members(self, sha256: str) -> list[tuple[str, int, str]] | None:
        """A directory's members from one verified read of its manifest; None for a blob,
        told by its first bytes without reading the rest (a blob can be a checkpoint)."""
        with self.open(sha256) as f:
            head = f.read(len(MANIFEST_MARK))
            if head != MANIFEST_MARK:
                return None
            data = head + f.read()
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise ArtifactCorruptError(sha256, actual, self.location)
        return _parse_manifest(data)

    def manifest(self, sha256: str) -> list[tuple[str, int, str]]:
        """The (path, size, sha256) members of a directory artifact."""
        members = self._members(sha256)
        if members is None:
            raise NotADirectoryError(f"artifact {sha256} is a blob, not a directory")
        return members

    def stat(self, sha256: str) -> ArtifactInfo:
        """Size and kind of a stored artifact, for the `artifacts` table."""
        members = self._members(sha256)
        if members is not None:
            return ArtifactInfo(sha256, sum(s for _, s, _ in members), "dir", len(members))
        return ArtifactInfo(sha256, self.backend.size(_rel(sha256)), "blob")

    def checkout(self, sha256: str, dest: str | os.PathLike[str] | None = None) -> Path:
        """Materialize a directory artifact as real files (verified) and return the path.

        Without `dest` it goes to a cache (checkouts/<id> beside a local store's objects;
        for a remote store, the read-through cache under EVOTRAINER_HOME/cache), made once:
        the tree is assembled under a temporary name and renamed, so a concurrent loader
        sees either nothing or the whole checkpoint. Every member is hashed as it is
        fetched, and a cached tree is re-hashed on every use.
        """
        final = self.backend.checkout_root() / sha256 if dest is None else Path(dest)
        members = self.manifest(sha256)
        if dest is None and final.is_dir():
            # The cache is outside the content-addressed objects, so nothing else
            # guards it: re-hash it, and rebuild it from the objects if it drifted.
            if self._checkout_intact(final, members):
                return final
            shutil.rmtree(final)
        # Unique per call: two worker threads of one process may check out the same id.
        tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self._transfer(lambda m: self._fetch(m[2], tmp / m[0]), members)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.mkdir(parents=True, exist_ok=True)
        if final.exists() and dest is None:
            shutil.rmtree(tmp, ignore_errors=True)  # another process won the race: same content
        else:
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        return final

    def _fetch(self, member: str, target: Path) -> None:
        """Copy one object to a local file, hashing it on the way."""
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with self._open(member) as src, target.open("wb") as dst:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                digest.update(chunk)
                dst.write(chunk)
        if digest.hexdigest() != member:
            raise ArtifactCorruptError(member, digest.hexdigest(), self.location)

    def _transfer(self, one: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        """`one` over the members of a directory: a few at a time on a remote store, where
        each costs round trips that overlap (a checkpoint is a handful of files), in order
        on a local one, where they would only compete for the disk."""
        if not self.remote or len(items) < 2:
            return [one(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(8, len(items))) as pool:
            return list(pool.map(one, items))

    @staticmethod
    def _checkout_intact(root: Path, members: list[tuple[str, int, str]]) -> bool:
        for rel, _size, member in members:
            path = root / rel
            if not path.is_file() or _hash_file(path) != member:
                return False
        return True

    # ---- auditing ------------------------------------------------------------------

    def check(self, sha256: str) -> None:
        """Raise ArtifactMissingError / ArtifactCorruptError unless the artifact (and, for a
        directory, every member) is present and hashes to its id."""
        if not self.exists(sha256):
            raise ArtifactMissingError(sha256, self.location)
        with self.backend.open_read(_rel(sha256)) as f:
            digest = hashlib.sha256()
            head = f.read(len(MANIFEST_MARK))
            digest.update(head)
            # What may be a manifest is kept as it is hashed, so its members come from the
            # bytes just verified rather than from a second read that could differ.
            kept = [head] if head == MANIFEST_MARK else None
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                digest.update(chunk)
                if kept is not None:
                    kept.append(chunk)
        if digest.hexdigest() != sha256:
            raise ArtifactCorruptError(sha256, digest.hexdigest(), self.location)
        members = _parse_manifest(b"".join(kept)) if kept is not None else None
        for _path, _size, member in members or ():
            self.check(member)

    def verify(self, sha256: str) -> bool:
        """True when the artifact is present and intact (members included)."""
        try:
            self.check(sha256)
        except (ArtifactMissingError, ArtifactCorruptError):
            return False
        return True

    def audit(self, sha256s: list[str]) -> dict[str, str]:
        """For `evotrainer audit --artifacts`: each id -> "ok", "missing" or "corrupt"."""
        result = {}
        for sha in sorted(set(sha256s)):
            try:
                self.check(sha)
                result[sha] = "ok"
            except ArtifactMissingError:
                result[sha] = "missing"
            except ArtifactCorruptError:
                result[sha] = "corrupt"
        return result

    def ids(self) -> Iterator[str]:
        """Every stored artifact id (for listing and garbage checks)."""
        for rel in self.backend.list("objects"):
            parts = rel.split("/")
            if len(parts) == 3 and not parts[2].startswith(".tmp-"):
                yield parts[1] + parts[2]


def _parse_manifest(data: bytes) -> list[tuple[str, int, str]] | None:
    """Members of a manifest, or None when the bytes are not exactly a canonical manifest
    (a blob may start like one by chance; only canonical bytes count as a directory)."""
    try:
        doc = json.loads(data)
        members = [(str(e["path"]), int(e["size"]), _check_id(e["sha256"])) for e in doc["files"]]
    except (ValueError, KeyError, TypeError, InvalidArtifactIdError):
        return None
    return members if manifest_bytes(members) == data else None


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from iter(lambda: f.read(_CHUNK), b"")


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    for chunk in _read_chunks(path):
        digest.update(chunk)
    return digest.hexdigest()


def open_store(location: str | os.PathLike[str] | None = None) -> ArtifactStore:
    """The store at `location`, else EVOTRAINER_ARTIFACTS, else $EVOTRAINER_HOME/artifacts."""
    if location is None:
        from evotrainer.config import artifacts_location

        location = artifacts_location()
    return ArtifactStore(backend_for(str(location)))
