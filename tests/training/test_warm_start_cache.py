"""The shared warm-start cache (EVOTRAINER_TINY_CACHE): a store that lacks the tiny warm
start copies it, ref and figures, from the cache; one that builds it leaves a copy there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evotrainer.artifacts import open_store
from evotrainer.training.warm_start_cache import copy_refs


def test_refs_are_copied_with_what_they_point_at_or_not_at_all(tmp_path: Path) -> None:
    source, target = open_store(tmp_path / "source"), open_store(tmp_path / "target")
    (tmp_path / "policy" / "sub").mkdir(parents=True)
    (tmp_path / "policy" / "config.json").write_text("{}")
    (tmp_path / "policy" / "sub" / "weights").write_bytes(b"\x00\x01" * 1000)
    source.set_ref("tree", source.put_dir(tmp_path / "policy"))
    source.set_ref("tree.details", source.put_bytes(b'{"loss": 0.5}'))

    assert not copy_refs(source, target, ["tree", "missing"])
    assert target.get_ref("tree") is None  # nothing copied when one ref is missing
    assert copy_refs(source, target, ["tree", "tree.details"])
    assert target.get_ref("tree") == source.get_ref("tree") and target.is_dir(source.get_ref("tree") or "")
    assert target.get(target.get_ref("tree.details") or "") == b'{"loss": 0.5}'
    checkout = target.checkout(target.get_ref("tree") or "")
    assert (checkout / "sub" / "weights").read_bytes() == b"\x00\x01" * 1000


def test_a_store_without_the_warm_start_copies_the_caches_and_trains_none(
    math_domain: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache holds a stand-in under the warm start's ref: a store that resolves `tiny`
    gets that very artifact, which no build gives (a build would give the real policy)."""
    from evotrainer.training import resolve_policy
    from evotrainer.training.tiny import TinyRecipe, cache_key

    cache = open_store(tmp_path / "cache")
    monkeypatch.setenv("EVOTRAINER_TINY_CACHE", cache.location)
    (tmp_path / "stand-in").mkdir()
    (tmp_path / "stand-in" / "config.json").write_text('{"stand_in": true}')
    ref = f"policy/tiny/{math_domain.name}-{cache_key('math:digit_add', TinyRecipe(), 0)}"
    cache.set_ref(ref, cache.put_dir(tmp_path / "stand-in"))
    cache.set_ref(f"{ref}.details", cache.put_bytes(b'{"sft_loss": 0.25}'))

    store = open_store(tmp_path / "store")
    policy = resolve_policy("tiny", store, domain=math_domain, domain_spec="math:digit_add")
    assert policy.sha256 == cache.get_ref(ref) and policy.created and policy.details == {"sft_loss": 0.25}
    assert store.get_ref(ref) == policy.sha256 and store.verify(policy.sha256)


@pytest.mark.slow
def test_a_fresh_store_takes_the_warm_start_from_the_cache(math_domain: Any, tmp_path: Path) -> None:
    from evotrainer.training import resolve_policy
    from evotrainer.training.warm_start_cache import shared_store

    # The run's own cache (tests/conftest.py): built here or by an earlier test, it is there after.
    cache = shared_store()
    assert cache is not None
    first = resolve_policy("tiny", open_store(tmp_path / "one"), domain=math_domain, domain_spec="math:digit_add")
    assert cache.get_ref(first.source) == first.sha256
    second_store = open_store(tmp_path / "two")
    second = resolve_policy("tiny", second_store, domain=math_domain, domain_spec="math:digit_add")
    assert second.created and second.event_payload() == first.event_payload()  # copied: the same checkpoint
    assert second_store.get_ref(first.source) == first.sha256
    again = resolve_policy("tiny", second_store, domain=math_domain, domain_spec="math:digit_add")
    assert not again.created and again.event_payload() == first.event_payload()
