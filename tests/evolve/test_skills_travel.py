"""Skills that travel: a skill validated in one database is exported to a file, imported
into another database (as SkillImported, with its provenance, refused whole when the file
is bad), and there proposes its own change as a candidate (proposer skill:ID), in another
domain, which the lineage names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from evotrainer.evolve import fork_for_intervention, record_promotion, skill_library
from evotrainer.evolve.skill_proposals import skill_candidates
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.conftest import create_database, drop_database, url_for
from tests.evolve.builders import evaluate, propose, start, trained
from tests.test_cli import run

SKILL = "no_condition/grpo.learning_rate/raise"


@pytest.fixture
def other_env(template_database: str, cli_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A second database, as another team's record would be."""
    name = create_database(template_database)
    yield {**cli_env, "EVOTRAINER_DATABASE_URL": url_for(name)}
    drop_database(name)


def validated_skill(store: EventStore) -> None:
    """demo (math): doubling the learning rate was promoted, so its skill has one success."""
    main = start(store)
    evaluate(store, main, [0.5, 0.25] * 20)
    iid = propose(store, main, "grpo.learning_rate", 2e-3)
    fork_for_intervention(store, main, "lr-up", iid)
    lr = BranchRef("demo", "lr-up")
    trained(store, lr, "lr-up")
    evaluate(store, lr, [0.75, 0.5] * 20)
    assert record_promotion(store, lr)[0].promoted


def test_a_skill_exported_from_one_database_proposes_in_another(
    store: EventStore, cli_env: dict[str, str], other_env: dict[str, str], tmp_path: Path
) -> None:
    validated_skill(store)
    file = tmp_path / "skills.json"
    exported = run(cli_env, "skills", "export", str(file))
    assert exported.returncode == 0, exported.stderr
    document = json.loads(file.read_text())
    [entry] = document["skills"]
    assert entry["skill_id"] == SKILL and (entry["successes"], entry["failures"]) == (1, 0)
    assert entry["change"] == {"field": "grpo.learning_rate", "old_value": 1e-3, "new_value": 2e-3}
    assert entry["validated_in"] == ["math"] and entry["effect_sizes"] and entry["expected_outcome"]
    assert run(cli_env, "skills", "export", "--format", "md").stdout.startswith("# Skills (1)\n\n## " + SKILL)

    # The other database: a code experiment, its step size already doubled once.
    with EventStore.connect(other_env["EVOTRAINER_DATABASE_URL"], actor="test") as other:
        other.create_experiment("other", {"domain": "code"})
        spec = HarnessSpec().with_field("grpo.learning_rate", 4e-4)
        other.append(BranchRef("other", "main"), [versioned_event(spec)])
        before = other.head(BranchRef("other", "main"))

        # Bad files are refused whole, in one line, and write nothing.
        bad = json.loads(file.read_text())
        bad["skills"].append({**entry, "skill_id": "no_condition/grpo.learning_rate/lower"})
        cases = {"not json": "{", "no format": json.dumps({"skills": []}),
                 "wrong way": json.dumps(bad)}  # fmt: skip
        for case, text in cases.items():
            path = tmp_path / f"{case}.json"
            path.write_text(text)
            refused = run(other_env, "skills", "import", str(path), "--into", "other")
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, (case, refused.stderr)
        assert "skill 2" in refused.stderr and "does not lower the field" in refused.stderr
        assert other.head(BranchRef("other", "main")) == before

        imported = run(other_env, "skills", "import", str(file), "--into", "other")
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.splitlines()[-1] == f"1 skills imported from {file} into other/main"
        again = run(other_env, "skills", "import", str(file), "--into", "other")
        assert again.returncode == 0
        events = [e for e in other.read_branch(BranchRef("other", "main")) if e.type == "SkillImported"]
        assert len(events) == 1  # the same file again: no second record
        assert events[0].payload["source"]["file"] == "skills.json"
        assert events[0].payload["source"]["exported_from"] == {"experiments": ["demo"]}
        listed = json.loads(run(other_env, "skills", "list", "--json").stdout)
        assert [(s["skill_id"], s["imported"], s["validated_in"]) for s in listed] == [(SKILL, 1, ["math"])]
        # In SQL too: the imported skill with its source, apart from the outcomes recorded here.
        queried = run(other_env, "sql", "SELECT skill_id, experiment, origin->>'file' AS file, validated_in "
                      "FROM projections.imported_skills", "--json")  # fmt: skip
        assert queried.returncode == 0, queried.stderr
        assert json.loads(queried.stdout) == [{"skill_id": SKILL, "experiment": "other", "file": "skills.json",
                                               "validated_in": ["math"]}]  # fmt: skip

        # Nothing diagnosed on other/main: the no_condition skill fires, in code, carried
        # over by its ratio (x2 of this harness's 4e-4), as the controller would see it.
        [candidate] = skill_candidates(other, spec, [], "code", skill_library(other))
        assert (candidate.field, candidate.value, candidate.proposer) == ("grpo.learning_rate", 8e-4, f"skill:{SKILL}")
        assert skill_candidates(other, spec, ["reward_hacking"], "code", skill_library(other)) == []

        proposed = run(other_env, "skills", "propose", "other/main", "--json")
        assert proposed.returncode == 0, proposed.stderr
        [p] = json.loads(proposed.stdout)
        assert (p["proposer"], p["new_value"]) == (f"skill:{SKILL}", 8e-4)
        assert "transferred from math, untried here" in p["hypothesis"]
        fork_for_intervention(other, BranchRef("other", "main"), "lr-from-skill", p["intervention_id"])
        tree = run(other_env, "lineage", "other").stdout
        assert f"lr-from-skill @{p['recorded_seq']}  [running]  by skill:{SKILL}" in tree
