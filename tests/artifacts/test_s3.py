"""The artifact store on a real S3-compatible server (moto's server mode on loopback):
round trips, corruption and absence found by audit, the read-through checkpoint cache, a
writer SIGKILLed mid-upload, and racing writers of one address.

Run: pytest tests/artifacts/test_s3.py -q
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evotrainer.artifacts import ArtifactCorruptError, ArtifactStore, ArtifactStoreUnreachableError, open_store
from evotrainer.artifacts.s3 import S3Backend
from tests.s3server import S3Server, free_port, s3_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def store(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    opened = open_store(s3.url(f"t-{uuid.uuid4().hex[:8]}"))
    assert isinstance(opened.backend, S3Backend)
    return opened


def _keys(s3: S3Server, store: ArtifactStore) -> list[str]:
    prefix = store.location.split("/", 3)[3] + "/"
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix)  # type: ignore[attr-defined]
    return sorted(o["Key"][len(prefix):] for o in listed.get("Contents", []))


def test_round_trip_and_audit(s3: S3Server, store: ArtifactStore, tmp_path: Path) -> None:
    sha = store.put_bytes(b"evidence")
    assert store.get(sha) == b"evidence" and store.put_bytes(b"evidence") == sha
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "weights.bin").write_bytes(os.urandom(300_000))
    (ckpt / "sub" / "config.json").write_text("{}")
    dir_sha = store.put_dir(ckpt)
    # Only content-addressed objects: no temporary keys left behind by the writes.
    assert _keys(s3, store) == sorted(f"objects/{h[:2]}/{h[2:]}" for h in store.ids())
    assert len(_keys(s3, store)) == 4 and store.stat(dir_sha).files == 2
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert store.audit([sha, dir_sha, missing]) == {sha: "ok", dir_sha: "ok", missing: "missing"}

    # Bytes replaced behind the store's back (a raw PUT) are found by audit, member included.
    weights = hashlib.sha256((ckpt / "weights.bin").read_bytes()).hexdigest()
    s3.client().put_object(Bucket=s3.bucket, Key=f"{store.location.split('/', 3)[3]}/objects/{weights[:2]}/{weights[2:]}",  # type: ignore[attr-defined]
                           Body=b"truncated")
    assert store.audit([sha, dir_sha]) == {sha: "ok", dir_sha: "corrupt"}
    with pytest.raises(ArtifactCorruptError):
        store.checkout(dir_sha)


def test_checkpoints_are_cached_under_home_and_rehashed_on_use(store: ArtifactStore, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(os.urandom(200_000))
    (ckpt / "config.json").write_text('{"layers": 2}')
    sha = store.put_dir(ckpt)
    path = store.checkout(sha)
    assert path == tmp_path / "home" / "cache" / "checkouts" / sha
    assert (path / "model.safetensors").read_bytes() == (ckpt / "model.safetensors").read_bytes()
    # A cached file that drifted is not used: the next checkout re-hashes and re-fetches it.
    (path / "config.json").write_text('{"layers": 3}')
    assert store.checkout(sha) == path
    assert (path / "config.json").read_text() == '{"layers": 2}'


def test_an_upload_that_does_not_hash_to_its_address_is_never_committed(store: ArtifactStore) -> None:
    sha = hashlib.sha256(b"the real bytes").hexdigest()
    with pytest.raises(ArtifactCorruptError):
        store.backend.write_atomic(f"objects/{sha[:2]}/{sha[2:]}", [b"other ", b"bytes"])
    assert not store.exists(sha)


_WRITER = textwrap.dedent("""
    import sys, time
    import evotrainer.artifacts.s3 as s3
    from evotrainer.artifacts import open_store
    s3.PART_BYTES = 5 << 20  # S3's smallest part: a multipart upload from the first 5 MiB
    store = open_store(sys.argv[1])
    sha, seed = sys.argv[2], sys.argv[3].encode()

    def slow_chunks():  # a slow source (disk, network): 40 MiB over about 4 s
        for i in range(40):
            time.sleep(0.1)
            yield (seed * (1 << 20))[: 1 << 20]

    store.backend.write_atomic(f"objects/{sha[:2]}/{sha[2:]}", slow_chunks())
    print("committed", flush=True)
""")


def _expected(seed: bytes) -> str:
    return hashlib.sha256((seed * (1 << 20))[: 1 << 20] * 40).hexdigest()


def test_a_writer_killed_mid_upload_leaves_no_object(s3: S3Server, store: ArtifactStore) -> None:
    sha = _expected(b"a")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, store.location, sha, "a"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = s3.client()
    deadline = time.monotonic() + 60
    # Kill it once its multipart upload holds parts, long before its last chunk.
    while not client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads"):  # type: ignore[attr-defined]
        assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()[0]
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(writer.pid, signal.SIGKILL)
    assert writer.wait(timeout=30) == -signal.SIGKILL
    assert b"committed" not in (writer.stdout.read() if writer.stdout else b"")
    assert not store.exists(sha) and _keys(s3, store) == [] and store.audit([sha]) == {sha: "missing"}
    # Its parts went up but were never completed: invisible to every reader.
    assert any(u["Key"].endswith(sha[2:]) for u in client.list_multipart_uploads(Bucket=s3.bucket)["Uploads"])  # type: ignore[attr-defined]

    # The next writer of the address (the task run again) stores it whole.
    again = subprocess.run([sys.executable, "-c", _WRITER, store.location, sha, "a"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.stdout.strip() == "committed", again.stdout + again.stderr
    assert store.audit([sha]) == {sha: "ok"} and store.backend.size(f"objects/{sha[:2]}/{sha[2:]}") == 40 << 20


def test_racing_writers_of_one_address_are_harmless(store: ArtifactStore) -> None:
    import evotrainer.artifacts.s3 as s3_module

    data = os.urandom(6 << 20)
    sha = hashlib.sha256(data).hexdigest()
    location = store.location
    old = s3_module.PART_BYTES
    s3_module.PART_BYTES = 5 << 20  # two parts each: the writers' multipart uploads interleave
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: open_store(location).put_bytes(data), range(4)))
    finally:
        s3_module.PART_BYTES = old
    assert results == [sha] * 4
    assert store.get(sha) == data and list(store.ids()) == [sha]


def test_a_server_that_cannot_be_reached_is_an_error_not_a_missing_artifact(
    store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    unreachable = open_store(store.location)
    with pytest.raises(ArtifactStoreUnreachableError, match="cannot be reached"):
        unreachable.audit([hashlib.sha256(b"x").hexdigest()])
