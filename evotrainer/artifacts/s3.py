"""Artifacts on any S3-compatible object store (AWS S3, MinIO, Ceph, moto...), through s3fs.

    EVOTRAINER_ARTIFACTS=s3://bucket/prefix  AWS_ACCESS_KEY_ID=...  AWS_SECRET_ACCESS_KEY=...
    AWS_ENDPOINT_URL=http://minio-host:9000  (any server that is not AWS; AWS_REGION as usual)

Why it writes straight to the final key instead of a temporary key and a rename as the
other backends do: an S3 object appears only when its PUT (or the completion of its
multipart upload) succeeds, whole or not at all, so a reader never sees half an object and
a writer killed mid-upload leaves no object (at most an unfinished multipart upload, which
no listing shows; a bucket lifecycle rule such as AbortIncompleteMultipartUpload cleans it
up). A copy to the final key would double the traffic of every checkpoint for nothing.

What the rename gave the local store that S3 does not give by itself is that the bytes
under an address are the ones hashed: a file that changed between hashing and uploading
would land under the old hash. So the upload is hashed as it streams, and an object whose
bytes do not hash to its address is aborted before it is committed. Writers racing on one
address upload the same bytes, and whichever completes last replaces identical content.

Install with `pip install 'evotrainer[s3]'`; s3fs is imported only when an s3:// store is
opened. Tests: `pytest tests/artifacts/test_s3.py` (a moto server on loopback).
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from evotrainer.artifacts.backends import FsspecBackend
from evotrainer.artifacts.errors import ArtifactCorruptError, ArtifactStoreUnreachableError

PART_BYTES = 64 << 20
"""Objects up to this size go in one PUT; larger ones in multipart uploads of this size
(S3 allows at most 10,000 parts, so up to 640 GB)."""


def s3_filesystem() -> Any:
    """An s3fs filesystem configured from the usual AWS variables.

    No listings cache: other hosts write the same bucket, and a cached listing would say an
    artifact they stored is missing. A fresh instance per store (not fsspec's shared one),
    so no other code's settings leak in.
    """
    import s3fs

    # botocore reads AWS_ENDPOINT_URL itself only in recent versions; passing it makes
    # every version of the stack agree on where the server is.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return s3fs.S3FileSystem(
        endpoint_url=endpoint,
        skip_instance_cache=True,
        use_listings_cache=False,
        default_block_size=PART_BYTES,
    )


def address_of(rel: str) -> str | None:
    """The sha256 an object path stands for (objects/ab/cdef... -> abcdef...); None for refs."""
    parts = rel.split("/")
    if len(parts) == 3 and parts[0] == "objects":
        return parts[1] + parts[2]
    return None


class S3Backend(FsspecBackend):
    """s3://bucket/prefix: objects written whole or not at all, verified against their address."""

    def __init__(self, url: str) -> None:
        self.fs = s3_filesystem()
        self.root = url[len("s3://") :].strip("/")
        self.location = url

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        """A server that cannot be reached (after s3fs's retries) is one clear error."""
        from botocore.exceptions import BotoCoreError

        try:
            yield
        except BotoCoreError as exc:
            raise ArtifactStoreUnreachableError(self.location, exc) from exc

    def exists(self, rel: str) -> bool:
        # Only "no such key" is absence: fsspec's isfile would say False for a server that
        # cannot be reached too, and audit would report every artifact missing.
        try:
            with self._reaching():
                return bool(self.fs.info(self._path(rel))["type"] == "file")
        except FileNotFoundError:
            return False

    def write_atomic(self, rel: str, chunks: Iterable[bytes]) -> None:
        expected = address_of(rel)
        digest = hashlib.sha256()
        head: list[bytes] = []
        held = 0
        it = iter(chunks)
        for chunk in it:
            digest.update(chunk)
            head.append(chunk)
            held += len(chunk)
            if held > PART_BYTES:
                self._write_multipart(rel, head, it, digest, expected)
                return
        # Up to one part: a single PUT of bytes already in memory (through a file object
        # it would be buffered and copied again, measured 1.7x slower for 50 MB).
        self._check(expected, digest)
        with self._reaching():
            self.fs.pipe_file(self._path(rel), b"".join(head))

    def write_hashed(self, rel: str, data: bytes) -> None:
        """One PUT of bytes the caller has just hashed for `rel`: nothing can change between
        the hash and the upload, so they are not hashed a second time."""
        with self._reaching():
            self.fs.pipe_file(self._path(rel), data)

    def _write_multipart(self, rel: str, head: list[bytes], rest: Iterator[bytes], digest: Any,
                         expected: str | None) -> None:
        f = self.fs.open(self._path(rel), "wb", block_size=PART_BYTES)
        try:
            for chunk in head:
                f.write(chunk)
            for chunk in rest:
                digest.update(chunk)
                f.write(chunk)
            self._check(expected, digest)
        except BaseException:
            # Abort the multipart upload: nothing was committed, so nothing appears under
            # the address. Marked closed so that the file object's finalizer does not
            # commit what is left.
            f.discard()
            f.closed = True
            raise
        f.close()  # completes the multipart upload: the object appears whole

    def _check(self, expected: str | None, digest: Any) -> None:
        if expected is not None and digest.hexdigest() != expected:
            raise ArtifactCorruptError(expected, digest.hexdigest(), self.location)

    def open_read(self, rel: str) -> IO[bytes]:
        with self._reaching():
            return _Prefetched(self.fs, self._path(rel))  # type: ignore[return-value]


class _Prefetched(io.RawIOBase):
    """An object's bytes, one GET streamed by a thread of its own, so that hashing and
    writing what has arrived overlaps with the transfer of the rest (every read of an
    artifact hashes it; done after the transfer, hashing 50 MB added a third to its time).
    FileNotFoundError when the object is not there, raised by the constructor."""

    def __init__(self, fs: Any, path: str) -> None:
        from fsspec.asyn import sync

        bucket, key, _ = fs.split_path(path)
        self._body = sync(fs.loop, fs._call_s3, "get_object", Bucket=bucket, Key=key)["Body"]
        self._chunks: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=16)
        self._stop = threading.Event()
        self._held = bytearray()
        self._eof = False
        threading.Thread(target=self._pump, args=(fs.loop, sync), daemon=True).start()

    def _pump(self, loop: Any, sync: Any) -> None:
        try:
            while not self._stop.is_set():
                chunk = sync(loop, self._body.read, 1 << 20)
                while not self._stop.is_set():
                    try:
                        self._chunks.put(chunk, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if not chunk:
                    return
        except BaseException as exc:  # handed to the reader, who raises it
            self._chunks.put(exc)
        finally:
            self._body.close()

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        want = -1 if size is None else size
        while not self._eof and (want < 0 or len(self._held) < want):
            chunk = self._chunks.get()
            if isinstance(chunk, BaseException):
                raise OSError(f"reading an artifact from S3 failed: {chunk}") from chunk
            self._eof = not chunk
            self._held += chunk
        data = bytes(self._held if want < 0 else self._held[:want])
        del self._held[: len(data)]
        return data

    def close(self) -> None:
        self._stop.set()
        super().close()
