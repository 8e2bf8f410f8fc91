"""Which artifact ids a payload names (evotrainer.artifacts.references)."""

from __future__ import annotations

from evotrainer.artifacts.references import artifact_fields

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_every_sha256_field_is_found_with_its_path_in_order() -> None:
    payload = {
        "policy_sha256": A,
        "note_sha256": "not an id",  # a *_sha256 field that holds no artifact id is no reference
        "inputs": {"evidence_sha256": B, "plain": "x", "n": 3},
        "runs": [{"results_sha256": C}, 7, [{"deep_sha256": A}]],
        "sha256": B,
    }
    assert list(artifact_fields(payload)) == [
        ("policy_sha256", A), ("inputs.evidence_sha256", B), ("runs[0].results_sha256", C),
        ("runs[2][0].deep_sha256", A), ("sha256", B),
    ]
    assert list(artifact_fields({"scalar": 1, "list": [1, "a"], "empty": {}})) == []


def test_text_that_only_looks_like_a_reference_finds_nothing_and_a_real_one_is_never_missed() -> None:
    # The quick search of the payload's JSON text must neither let a value that spells a
    # key through nor miss a key however it is nested or written.
    assert list(artifact_fields({"note": f'x_sha256":"{A}'})) == []
    quoted = 'k"'
    assert list(artifact_fields({"ünïcode_sha256": A, quoted: {"x_sha256": B}})) == [
        ("ünïcode_sha256", A), ('k".x_sha256', B)]  # fmt: skip
    # A payload that is not JSON (a set in it) is walked as before.
    assert list(artifact_fields({"tags": {"x"}, "policy_sha256": C})) == [("policy_sha256", C)]
