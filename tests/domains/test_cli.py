"""`evotrainer domains list` and `sample` show every domain's tasks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evotrainer.cli.domains import app
from evotrainer.domains import UnknownDomainError, get_domain

runner = CliRunner()


def test_list_json_names_every_domain_and_component() -> None:
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert set(rows) == {"math", "code", "swe"}
    for name in rows:
        assert rows[name]["reward_components"] == list(get_domain(name).reward_components)
    assert "pass_fraction" in rows["code"]["reward_components"]
    assert "constant" in rows["code"]["variants"]


def test_list_table() -> None:
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0 and "swe" in result.output and "digit_add" in result.output


@pytest.mark.parametrize("name", ["math", "math:digit_add", "code", "code:constant", "code:humaneval", "swe"])
def test_sample_each_domain(name: str) -> None:
    result = runner.invoke(app, ["sample", name, "--n", "2", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 2 and all(row["prompt"] and row["task_id"] for row in rows)
    text = runner.invoke(app, ["sample", name, "--n", "1", "--split", "eval", "--seed", "4"])
    assert text.exit_code == 0 and "-- reference:" in text.output


def test_unknown_domain_raises_the_typed_error() -> None:
    result = runner.invoke(app, ["sample", "chess"])
    assert result.exit_code != 0 and isinstance(result.exception, UnknownDomainError)
