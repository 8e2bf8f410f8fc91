"""The rollout evidence format lives in `evotrainer.evidence` (diagnostics read it without
importing training); it is re-exported here for the trainer's own modules."""

from evotrainer.evidence import EVIDENCE_VERSION, RolloutRecord, from_jsonl, summarize, to_jsonl

__all__ = ["EVIDENCE_VERSION", "RolloutRecord", "from_jsonl", "summarize", "to_jsonl"]
