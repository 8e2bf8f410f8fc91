"""The artifact store: round trips, stable directory ids, atomicity, corruption detection.

Run: pytest tests/artifacts -q
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import IO

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evotrainer.artifacts import (
    ArtifactCorruptError,
    ArtifactInfo,
    ArtifactMissingError,
    ArtifactStore,
    InvalidArtifactIdError,
    open_store,
)
from evotrainer.artifacts.backends import LocalBackend
from evotrainer.errors import EvotrainerError


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return open_store(tmp_path / "arts")
    return open_store(f"memory://evotrainer-test-{uuid.uuid4().hex}")


def _corrupt(store: ArtifactStore, sha: str, data: bytes) -> None:
    store.backend.write_atomic(f"objects/{sha[:2]}/{sha[2:]}", [data])


def test_put_get_roundtrip(store: ArtifactStore) -> None:
    sha = store.put_bytes(b"hello")
    assert sha == hashlib.sha256(b"hello").hexdigest()
    assert store.get(sha) == b"hello"
    assert store.exists(sha) and store.verify(sha)
    assert store.put_bytes(b"hello") == sha  # idempotent
    with store.open(sha) as f:
        assert f.read() == b"hello"
    assert store.stat(sha).kind == "blob" and store.stat(sha).size == 5
    assert sha in set(store.ids())


def test_put_file_streams(store: ArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # several chunks
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    sha = store.put_file(path)
    assert sha == hashlib.sha256(data).hexdigest()
    assert store.get(sha) == data


def _make_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_dir_id_is_stable_and_checkout_restores(store: ArtifactStore, tmp_path: Path) -> None:
    files = {"config.json": b"{}", "sub/model.safetensors": b"\x00" * 100, "tok.json": b"[1]"}
    _make_tree(tmp_path / "a", files)
    # Same content written in another order, other timestamps: same id.
    _make_tree(tmp_path / "b", dict(reversed(list(files.items()))))
    os.utime(tmp_path / "b" / "config.json", (1, 1))
    sha_a, sha_b = store.put_dir(tmp_path / "a"), store.put_dir(tmp_path / "b")
    assert sha_a == sha_b
    assert store.is_dir(sha_a) and store.stat(sha_a).files == 3
    out = store.checkout(sha_a, tmp_path / "out")
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    (tmp_path / "a" / "tok.json").write_bytes(b"[2]")
    assert store.put_dir(tmp_path / "a") != sha_a


def test_default_checkout_is_cached(tmp_path: Path) -> None:
    store = open_store(tmp_path / "arts")
    _make_tree(tmp_path / "a", {"x": b"1"})
    sha = store.put_dir(tmp_path / "a")
    first = store.checkout(sha)
    assert first == tmp_path / "arts" / "checkouts" / sha
    assert store.checkout(sha) == first
    assert (first / "x").read_bytes() == b"1"


def test_missing_and_corrupt_are_detected(store: ArtifactStore, tmp_path: Path) -> None:
    sha = store.put_bytes(b"payload")
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert not store.verify(missing)
    with pytest.raises(ArtifactMissingError) as info:
        store.get(missing)
    assert info.value.sha256 == missing and isinstance(info.value, EvotrainerError)

    _corrupt(store, sha, b"paylaod")
    assert not store.verify(sha)
    with pytest.raises(ArtifactCorruptError) as corrupt:
        store.get(sha)
    assert corrupt.value.actual == hashlib.sha256(b"paylaod").hexdigest()
    assert store.audit([sha, missing]) == {sha: "corrupt", missing: "missing"}


def test_corrupt_member_of_directory_is_detected(store: ArtifactStore, tmp_path: Path) -> None:
    _make_tree(tmp_path / "ckpt", {"w.bin": b"weights", "c.json": b"{}"})
    sha = store.put_dir(tmp_path / "ckpt")
    assert store.verify(sha)
    _corrupt(store, hashlib.sha256(b"weights").hexdigest(), b"weightz")
    assert not store.verify(sha)
    with pytest.raises(ArtifactCorruptError):
        store.check(sha)
    with pytest.raises(ArtifactCorruptError):
        store.checkout(sha, tmp_path / "out")
    assert not (tmp_path / "out").exists()


class CountingBackend(LocalBackend):
    """The real local backend, counting how often each object is opened for reading."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.opened: Counter[str] = Counter()

    def open_read(self, rel: str) -> IO[bytes]:
        self.opened[rel] += 1
        return super().open_read(rel)


def test_a_manifest_is_read_once_per_call(tmp_path: Path) -> None:
    backend = CountingBackend(tmp_path / "arts")
    store = ArtifactStore(backend)
    _make_tree(tmp_path / "ckpt", {"w.bin": b"weights", "c.json": b"{}"})
    sha = store.put_dir(tmp_path / "ckpt")
    manifest = f"objects/{sha[:2]}/{sha[2:]}"
    for call in (store.check, store.stat, store.manifest, store.is_dir):
        backend.opened.clear()
        call(sha)
        assert backend.opened[manifest] == 1, call.__name__
    assert store.stat(sha) == ArtifactInfo(sha, len(b"weights{}"), "dir", 2)
    backend.opened.clear()
    store.check(sha)
    assert sorted(backend.opened.values()) == [1, 1, 1]  # the manifest and each member, once
    (store.checkout(sha) / "w.bin").write_bytes(b"drifted")
    backend.opened.clear()
    assert (store.checkout(sha) / "w.bin").read_bytes() == b"weights"
    assert backend.opened[manifest] == 1  # the rebuild uses the manifest the cache was checked against


def test_refs_point_at_existing_artifacts(store: ArtifactStore) -> None:
    sha = store.put_bytes(b"converted")
    assert store.get_ref("policy/x") is None
    store.set_ref("policy/x", sha)
    assert store.get_ref("policy/x") == sha


def test_invalid_id_is_rejected(store: ArtifactStore) -> None:
    with pytest.raises(InvalidArtifactIdError):
        store.exists("../../etc/passwd")


def test_no_temporary_files_left(tmp_path: Path) -> None:
    store = open_store(tmp_path / "arts")
    _make_tree(tmp_path / "d", {"a": b"1", "b": b"2"})
    store.put_dir(tmp_path / "d")
    leftovers = [p for p in (tmp_path / "arts").rglob("*") if p.name.startswith((".tmp-", "upload-"))]
    assert leftovers == []


def test_default_location_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOTRAINER_ARTIFACTS", raising=False)
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    assert open_store().location == str(tmp_path / "home" / "artifacts")
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(tmp_path / "elsewhere"))
    assert open_store().location == str(tmp_path / "elsewhere")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2048))
def test_any_bytes_roundtrip_property(tmp_path: Path, data: bytes) -> None:
    store = open_store(tmp_path / "prop")
    sha = store.put_bytes(data)
    assert store.get(sha) == data and store.verify(sha)
