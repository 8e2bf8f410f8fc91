"""Content-addressed storage of checkpoints and rollout evidence (see store.py).

from evotrainer.artifacts import open_store
store = open_store()            # EVOTRAINER_ARTIFACTS or $EVOTRAINER_HOME/artifacts
sha = store.put_dir("ckpt/")    # a checkpoint directory -> its manifest's sha256
store.verify(sha)               # re-hashes the manifest and every member
"""

from evotrainer.artifacts.errors import (
    ArtifactCorruptError,
    ArtifactError,
    ArtifactMissingError,
    ArtifactStoreUnreachableError,
    InvalidArtifactIdError,
)
from evotrainer.artifacts.store import ArtifactInfo, ArtifactStore, is_artifact_id, open_store

__all__ = [
    "ArtifactCorruptError",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactMissingError",
    "ArtifactStore",
    "ArtifactStoreUnreachableError",
    "InvalidArtifactIdError",
    "is_artifact_id",
    "open_store",
]
