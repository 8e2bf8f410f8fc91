"""The CLI as users and agents run it: real processes, real database, one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

EVOTRAINER = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "evotrainer")
README = Path(__file__).resolve().parents[1] / "README.md"


def run(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EVOTRAINER, *args], env=env, capture_output=True, text=True, input=input, check=False)


def count_events(env: dict[str, str]) -> int:
    return json.loads(run(env, "db", "status", "--json").stdout)["events"]


def test_create_append_list_fork_audit(cli_env: dict[str, str], tmp_path: Path) -> None:
    assert run(cli_env, "experiment", "create", "demo", "--domain", "math").returncode == 0
    payload = tmp_path / "task.json"
    payload.write_text('{"task_id": "t", "kind": "train", "queue": "train"}')
    appended = run(cli_env, "events", "append", "demo/main", "--type", "TaskRequested", "--payload", f"@{payload}",
                   "--expected-seq", "1", "--idempotency-key", "k")
    assert appended.returncode == 0, appended.stderr
    stored = json.loads(appended.stdout)
    assert (stored["seq"], stored["type"], stored["idempotency_key"]) == (2, "TaskRequested", "k")
    again = run(cli_env, "events", "append", "demo/main", "--type", "TaskRequested", "--payload", f"@{payload}",
                "--idempotency-key", "k")
    assert json.loads(again.stdout)["event_id"] == stored["event_id"]
    assert run(cli_env, "fork", "demo/main@1", "alt").returncode == 0
    listed = json.loads(run(cli_env, "events", "list", "demo/alt", "--json").stdout)
    assert [(e["branch"], e["seq"]) for e in listed] == [("main", 1), ("alt", 2)]
    table = run(cli_env, "events", "list", "demo/main").stdout.splitlines()
    assert table[0].split() == ["seq", "branch", "type", "actor", "time", "summary"] and len(table) == 3
    assert run(cli_env, "audit").stdout.startswith("intact: 2 branches, 3 events")


BAD_INVOCATIONS = [
    (["events", "append", "demo/main", "--type", "TaskRequested", "--payload", "{nope"], 2, "not valid JSON"),
    (["events", "append", "demo/main", "--type", "TaskRequested", "--payload", "[1]"], 2, "JSON object"),
    (["events", "append", "demo/main", "--type", "NoSuchEvent", "--payload", "{}"], 2, "unknown event type"),
    (["events", "append", "demo/main", "--type", "TaskRequested", "--payload", "{}"], 2, "invalid TaskRequested"),
    (["events", "append", "demo/main", "--type", "TaskRequested", "--payload", "@/no/such/file"], 2, "cannot read"),
    (["events", "append", "demo/nope", "--type", "TaskRequested", "--payload", "{}"], 2, "invalid TaskRequested"),
    (["events", "append", "demo/main", "--type", "TaskRequested", "--expected-seq", "7",
      "--payload", '{"task_id": "t", "kind": "noop", "queue": "q"}'], 3, "not the expected 7"),
    (["events", "append", "demo/main", "--type", "TaskRequested", "--causation-id", "xyz",
      "--payload", '{"task_id": "t", "kind": "noop", "queue": "q"}'], 2, "must be a UUID"),
    (["events", "append", "nope/main", "--type", "TaskRequested",
      "--payload", '{"task_id": "t", "kind": "noop", "queue": "q"}'], 2, "no branch nope/main"),
    (["events", "list", "demo"], 2, "bad ref"),
    (["events", "list", "demo/main@0"], 2, "SEQ counts from 1"),
    (["experiment", "create", "demo"], 2, "already exists"),
    (["experiment", "create", "-bad"], 2, "No such option"),
    (["experiment", "create", "a b"], 2, "bad experiment name"),
    (["fork", "demo/main@5", "x"], 2, "past the head"),
    (["fork", "demo/main", "main"], 2, "already exists"),
    (["fork", "demo/main", "bad/name"], 2, "bad branch name"),
    (["audit", "nope/main"], 2, "no branch"),
    (["nonsense"], 2, "No such command"),
    (["sql", "select 1", "--timeout-ms", "soon"], 2, "Invalid value for '--timeout-ms'"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_INVOCATIONS, ids=[" ".join(a[:3]) for a, _, _ in BAD_INVOCATIONS])
def test_bad_input_is_one_line_with_a_nonzero_exit_and_writes_nothing(
    cli_env: dict[str, str], args: list[str], code: int, message: str
) -> None:
    run(cli_env, "experiment", "create", "demo")
    before = count_events(cli_env)
    result = run(cli_env, *args)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert count_events(cli_env) == before


def test_an_unreachable_database_is_one_line(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "EVOTRAINER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"}
    result = run(env, "events", "list", "a/main")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "cannot connect" in result.stderr


def test_help_is_fast_and_never_imports_torch(cli_env: dict[str, str]) -> None:
    code = "import sys, evotrainer.cli; assert 'torch' not in sys.modules and 'trl' not in sys.modules"
    python = str(Path(EVOTRAINER).parent / "python")
    assert subprocess.run([python, "-c", code], check=False).returncode == 0
    assert run(cli_env, "--help").returncode == 0


# What the reading commands must not import: each costs more than the command's own work.
HEAVY_MODULES = ("pydantic", "rich", "jsonschema_rs", "celery", "kombu", "psycopg_pool", "sqlalchemy", "alembic",
                 "torch", "transformers", "trl", "evotrainer.events", "evotrainer.fleet", "evotrainer.training",
                 "evotrainer.evolve")
IMPORTS_OF = """
import sys
from evotrainer.cli import main
code = main(sys.argv[1:])
heavy = sorted({m for m in sys.modules for h in HEAVY if m == h or m.startswith(h + ".")})
print(code, " ".join(heavy) or "-", file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["sql", "select 1"], ["log", "demo/main"], ["events", "list", "demo/main"],
                                  ["audit"], ["db", "status"]], ids=" ".join)
def test_reading_commands_import_nothing_heavy(cli_env: dict[str, str], args: list[str]) -> None:
    """Not timed (timings on a shared machine are noise), but what a command's start costs
    is mostly imports: these commands run without the event models, Rich, Celery..."""
    assert run(cli_env, "experiment", "create", "demo").returncode == 0  # imports the models: another process
    python = str(Path(EVOTRAINER).parent / "python")
    code = f"HEAVY = {HEAVY_MODULES!r}\n{IMPORTS_OF}"
    done = subprocess.run([python, "-c", code, *args], env=cli_env, capture_output=True, text=True, check=False)
    assert done.stderr.splitlines()[-1] == "0 -", done.stderr


def test_integer_options_are_still_converted(cli_env: dict[str, str]) -> None:
    """Values are passed through unconverted only where conversion would not change them
    (a bad one is in BAD_INVOCATIONS)."""
    assert json.loads(run(cli_env, "sql", "select 7 as n", "--timeout-ms", "5000", "--json").stdout) == [{"n": 7}]
    slow = run(cli_env, "sql", "select pg_sleep(1)", "--timeout-ms", "50")  # the 50 reached the server as 50
    assert slow.returncode != 0 and "timeout" in slow.stderr, slow.stderr


def test_the_help_summaries_are_the_commands_own() -> None:
    """`evotrainer --help` lists COMMANDS without importing them: each summary there must
    be what the command's own help says."""
    from evotrainer.cli import COMMANDS
    from evotrainer.cli.lazy import load_command, short_help

    for name, spec in COMMANDS.items():
        assert short_help(spec.summary, 500) == load_command(name, spec).get_short_help_str(500), name


def test_bytecode_is_compiled_at_install() -> None:
    """The Makefile's install step compiles the package, so that a fresh process (even one
    with PYTHONDONTWRITEBYTECODE set) does not compile every module it imports."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert re.search(r"-m compileall [^\n]*\bevotrainer\b", makefile)


def _command_paths() -> list[str]:
    from evotrainer.cli import COMMANDS
    from evotrainer.cli.lazy import load_command

    paths = []
    for name, spec in COMMANDS.items():
        sub = getattr(load_command(name, spec), "commands", None)
        paths.extend(f"{name} {s}" for s in sub) if sub else paths.append(name)
    return paths


@pytest.mark.parametrize("command", _command_paths())
def test_every_command_is_documented_in_the_readme(command: str) -> None:
    text = README.read_text()
    head, _, tail = command.partition(" ")
    documented = re.search(rf"evotrainer {re.escape(head)}\b", text) and (
        not tail or re.search(rf"evotrainer {re.escape(head)} [^\n`]*\b{re.escape(tail)}\b", text)
    )
    assert documented, f"`evotrainer {command}` is not in README.md"
