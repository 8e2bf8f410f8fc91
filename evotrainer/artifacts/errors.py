"""Errors of the artifact store: an artifact that an event references is missing or corrupt.

Both carry the sha256 so `evotrainer audit --artifacts` can name the artifact in one line.
"""

from __future__ import annotations

from evotrainer.errors import EvotrainerError, UsageError


class ArtifactError(EvotrainerError):
    """Base of the artifact store's errors; `sha256` names the artifact concerned."""

    def __init__(self, sha256: str, message: str) -> None:
        super().__init__(message)
        self.sha256 = sha256


class ArtifactMissingError(ArtifactError):
    """No artifact with this hash is stored (or a member file of a directory artifact is gone)."""

    def __init__(self, sha256: str, location: str) -> None:
        super().__init__(sha256, f"artifact {sha256} is missing from {location}")
        self.location = location


class ArtifactCorruptError(ArtifactError):
    """The stored bytes no longer hash to the artifact's id: it was altered or truncated."""

    def __init__(self, sha256: str, actual: str, location: str) -> None:
        super().__init__(
            sha256,
            f"artifact {sha256} in {location} is corrupt: its content hashes to {actual}; "
            "restore it from a copy or re-run the computation that produced it",
        )
        self.actual = actual
        self.location = location


class InvalidArtifactIdError(ArtifactError, UsageError):
    """The string given is not a 64-character lowercase hex sha256 (a usage error, exit 2)."""

    exit_code = 2

    def __init__(self, sha256: str) -> None:
        super().__init__(sha256, f"{sha256!r} is not an artifact id (expected 64 lowercase hex characters)")


class ArtifactStoreUnreachableError(EvotrainerError):
    """The artifact store's server could not be reached (a remote store: S3, ...); nothing
    is known about the artifact, so it is neither missing nor corrupt."""

    def __init__(self, location: str, reason: object) -> None:
        super().__init__(f"the artifact store {location} cannot be reached: {reason}")
        self.location = location
