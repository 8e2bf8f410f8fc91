"""A cache of tiny warm starts that several artifact stores share (EVOTRAINER_TINY_CACHE).

A warm start is deterministic work kept under a ref whose key is every input (recipe,
domain, data seed, package versions, kernels: tiny.cache_key), so a store that lacks one
may copy it from another store rather than train it again (225 SFT steps, most of a
minute on 2 cores). The test suite points every test's store at one such cache, so each
warm start is built once per run instead of once per test. Unset, nothing is shared.
"""

from __future__ import annotations

import os

from evotrainer.artifacts import ArtifactStore, open_store


def shared_store() -> ArtifactStore | None:
    """The store named by EVOTRAINER_TINY_CACHE (a directory or fsspec URL), if set."""
    location = os.environ.get("EVOTRAINER_TINY_CACHE")
    return open_store(location) if location else None


def copy_refs(source: ArtifactStore, target: ArtifactStore, names: list[str]) -> bool:
    """Copy the artifacts the refs `names` point at in `source`, then the refs, into
    `target`; False, copying nothing, when `source` lacks one of them."""
    found = [(name, source.get_ref(name)) for name in names]
    if any(sha is None for _, sha in found):
        return False
    for name, sha in found:
        assert sha is not None
        # A directory comes back as the verified checkout's files, which hash to the same id.
        copied = target.put_dir(source.checkout(sha)) if source.is_dir(sha) else target.put_bytes(source.get(sha))
        if copied != sha:
            raise RuntimeError(f"copying {name} from {source.location} gave {copied}, not {sha}")
    # Refs last: a ref is never visible before what it points at.
    for name, sha in found:
        assert sha is not None
        target.set_ref(name, sha)
    return True
