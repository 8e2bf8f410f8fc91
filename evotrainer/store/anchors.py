"""Signed anchors: branch heads signed with a key the database never holds.

    evotrainer anchor math-tiny          # sign every head of the experiment
    evotrainer audit                     # verifies every stored anchor by default

The hash chain shows an edited event to anyone who re-hashes it, unless whoever edited it
(a superuser with the triggers switched off) also recomputed the hashes of the rest of the
branch. An anchor is a head's (seq, hash) signed with an Ed25519 key kept under
EVOTRAINER_HOME (or at EVOTRAINER_ANCHOR_KEY), created on first use with mode 0600. A
re-hashed branch no longer carries the anchored hash at the anchored seq, and a new anchor
over the forged chain needs the key. `audit` trusts the public keys of the local key and
of any `--trust` file; an anchor signed by another key is itself a finding.

What anchors do not cover: events after the newest anchor (anchor often; the controller
anchors after every promotion decision), and a thief of the key file. Deleting anchor
rows needs a superuser too, and leaves the chain as protected as it was before they were
written; `--out FILE` keeps a copy outside the database for that.

Anchors are taken only of a record that audits intact: signing a chain that is already
altered would vouch for the alteration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evotrainer.config import home
from evotrainer.errors import NotFoundError, UsageError
from evotrainer.refs import BranchRef
from evotrainer.store.audit import AuditProblem, audit
from evotrainer.store.eventstore import EventStore

KEY_ENV = "EVOTRAINER_ANCHOR_KEY"
_MESSAGE_VERSION = "evotrainer-anchor-v1"


@dataclass(frozen=True)
class Anchor:
    branch: str
    """EXPERIMENT/BRANCH"""
    seq: int
    event_hash: str
    public_key: str
    """Raw Ed25519 public key, hex."""
    signature: str

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or home() / "anchor-key.pem").expanduser()


def signing_key(path: Path | None = None) -> Any:
    """The Ed25519 private key at `path` (key_path() by default), created on first use:
    written with mode 0600 through a file only this user could ever open."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = path or key_path()
    if path.exists():
        try:
            return serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path} is not an unencrypted PEM Ed25519 private key: {exc}") from None
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return key


def public_hex(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return bytes(raw).hex()


def _message(branch: str, seq: int, event_hash: str) -> bytes:
    return f"{_MESSAGE_VERSION}\n{branch}\n{seq}\n{event_hash}".encode()


def anchor_experiment(store: EventStore, experiment: str | None = None, key: Any = None) -> list[Anchor]:
    """Sign every branch head of `experiment` (every experiment when None) and store the
    anchors; UsageError, nothing signed, when the record does not audit intact."""
    key = key or signing_key()
    report = audit(store, experiment=experiment)  # each branch of the experiment once
    if experiment and not report.heads:
        raise UsageError(f"no experiment {experiment!r}")
    if report.problems:
        raise UsageError(f"the record is altered ({report.problems[0]}): refusing to sign it")
    public = public_hex(key)
    anchors = []
    for branch, head in sorted(report.heads.items()):
        seq, event_hash = int(head["seq"]), str(head["hash"])
        anchors.append(Anchor(branch, seq, event_hash, public, key.sign(_message(branch, seq, event_hash)).hex()))
    with store.transaction() as conn:
        for a in anchors:
            ref = BranchRef.parse(a.branch, allow_seq=False)
            conn.execute(
                "INSERT INTO anchors (experiment, branch, seq, event_hash, public_key, signature)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (ref.experiment, ref.branch, a.seq, a.event_hash, a.public_key, a.signature),
            )
    return anchors


def stored_anchors(store: EventStore, experiment: str | None = None) -> list[Anchor]:
    rows = store.conn.execute(
        "SELECT experiment, branch, seq, event_hash, public_key, signature FROM anchors"
        " WHERE %s::text IS NULL OR experiment = %s ORDER BY experiment, branch, seq",
        (experiment, experiment),
    ).fetchall()
    return [Anchor(f"{e}/{b}", int(s), h, k, sig) for e, b, s, h, k, sig in rows]


def trusted_keys(extra: list[Path] | None = None) -> set[str]:
    """The local signing key's public half (when the key exists) and the public keys (hex,
    one per line) in the `--trust` files."""
    keys = set()
    if key_path().exists():
        keys.add(public_hex(signing_key()))
    for path in extra or []:
        try:
            keys |= {line.strip() for line in path.read_text().splitlines() if line.strip()}
        except OSError as exc:
            raise UsageError(f"cannot read trusted keys from {path}: {exc.strerror}") from None
    return keys


def verify_signed_anchors(store: EventStore, anchors: list[Anchor], trusted: set[str]) -> list[AuditProblem]:
    """Each anchor must be signed by a trusted key, and its head must still be in its
    branch with the anchored hash; one problem per anchor that fails."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    problems = []
    hashes: dict[str, dict[int, str]] = {}  # each branch read once, however many anchors it has
    for a in anchors:
        if a.public_key not in trusted:
            problems.append(AuditProblem(a.branch, a.seq, f"anchor signed by an untrusted key {a.public_key[:16]}"))
            continue
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(a.public_key)).verify(
                bytes.fromhex(a.signature), _message(a.branch, a.seq, a.event_hash))
        except (InvalidSignature, ValueError):
            problems.append(AuditProblem(a.branch, a.seq, "anchor's signature does not verify (forged anchor)"))
            continue
        if a.branch not in hashes:
            hashes[a.branch] = _hashes_by_seq(store, a.branch)
        if a.seq > 0 and hashes[a.branch].get(a.seq) != a.event_hash:
            problems.append(AuditProblem(a.branch, a.seq, "signed anchor's event is gone or has another hash "
                                                          "(history rewritten or truncated)"))
    return problems


def _hashes_by_seq(store: EventStore, branch: str) -> dict[int, str]:
    """The branch's effective history as seq -> hash (empty when the branch is gone)."""
    try:
        return {e.seq: e.hash for e in store.read_branch(BranchRef.parse(branch, allow_seq=False))}
    except NotFoundError:
        return {}
