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
import os
from collections.abc import Iterable
from typing import Any

from evotrainer.artifacts.backends import FsspecBackend
from evotrainer.artifacts.errors import ArtifactCorruptError

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

    def write_atomic(self, rel: str, chunks: Iterable[bytes]) -> None:
        expected = address_of(rel)
        digest = hashlib.sha256()
        f = self.fs.open(self._path(rel), "wb", block_size=PART_BYTES)
        try:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
            if expected is not None and digest.hexdigest() != expected:
                raise ArtifactCorruptError(expected, digest.hexdigest(), self.location)
        except BaseException:
            # Abort the multipart upload (or drop the buffer of a small one): nothing was
            # committed, so nothing appears under the address. Marked closed so that the
            # file object's finalizer does not commit what is left.
            f.discard()
            f.closed = True
            raise
        f.close()  # the PUT or the multipart completion: the object appears whole

    def open_read(self, rel: str) -> Any:
        # Read sequentially in large blocks: artifacts are read front to back, once.
        return self.fs.open(self._path(rel), "rb", block_size=PART_BYTES, cache_type="readahead")
