"""SWE-bench instances: read from JSONL or a saved `datasets` directory, repository from disk.

    swe:file=instances.jsonl,repos=checkouts/

Each instance needs `instance_id`, `problem_statement`, `base_commit`, `FAIL_TO_PASS`
and `PASS_TO_PASS` (JSON lists, or JSON strings holding lists, as SWE-bench ships them);
`patch` (the gold fix, kept as the task's reference), `test_patch`, `repo`, `version`,
`environment_setup_commit`, `test_cmd`/`test_command` and `requirements` (pyenv.py)
are read when present. The
repository is `<repos>/<instance_id>/` (a git checkout, read at base_commit without
touching its working tree; or a plain snapshot taken at base_commit) or
`<repos>/<instance_id>.bundle` (a git bundle). An instance that cannot be graded is
refused with one line naming it and why (UsageError), never loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evotrainer.domains.files import json_lines
from evotrainer.domains.swe.gitops import PatchError, apply_diff, decoded, tree_at
from evotrainer.domains.swe.pyenv import instance_packages, parse_requirements
from evotrainer.errors import UsageError
from evotrainer.sandbox import files_from_dir

REQUIRED = ("instance_id", "problem_statement", "base_commit", "FAIL_TO_PASS", "PASS_TO_PASS")
# History a snapshot may carry: never shown to the agent (the fix could be read from it).
HISTORY_NAMES = (".git", ".hg", ".svn")
HISTORY_SUFFIXES = (".orig", ".rej", ".patch", ".diff")


@dataclass(frozen=True)
class SweInstance:
    """The SWE-bench fields grading uses."""

    instance_id: str
    base_commit: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    test_patch: str = ""
    gold_patch: str = ""
    repo: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    test_cmd: str = ""
    """The instance's own test command (node ids are appended); empty: the domain's."""
    requirements: tuple[str, ...] = ()
    """Packages its tests need beyond the project's interpreter (see pyenv.py)."""


def scrub(files: Mapping[str, bytes]) -> tuple[dict[str, str], dict[str, bytes]]:
    """(text files, binary files), version-control history and patch leftovers dropped."""
    kept = {
        path: data
        for path, data in files.items()
        if not any(p in HISTORY_NAMES for p in Path(path).parts) and not path.endswith(HISTORY_SUFFIXES)
    }
    text = decoded(kept)
    return text, {p: d for p, d in kept.items() if p not in text}


def _test_ids(row: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = row[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: {key} is neither a JSON list nor a JSON string holding one") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {key} must be a list of test ids")
    return tuple(value)


def parse_instance(row: Mapping[str, Any], where: str) -> SweInstance:
    """The instance in `row`; `where` names it in errors (file:line)."""
    iid = row.get("instance_id")
    where = f"{where}: instance {iid}" if iid else where
    missing = [k for k in REQUIRED if row.get(k) is None or row.get(k) == ""]
    if missing:
        raise UsageError(f"{where} cannot be graded: missing {', '.join(missing)}")
    instance = SweInstance(
        instance_id=str(iid),
        base_commit=str(row["base_commit"]),
        fail_to_pass=_test_ids(row, "FAIL_TO_PASS", where),
        pass_to_pass=_test_ids(row, "PASS_TO_PASS", where),
        test_patch=str(row.get("test_patch") or ""),
        gold_patch=str(row.get("patch") or ""),
        repo=str(row.get("repo") or ""),
        version=str(row.get("version") or ""),
        environment_setup_commit=str(row.get("environment_setup_commit") or ""),
        test_cmd=str(row.get("test_cmd") or row.get("test_command") or ""),
        requirements=parse_requirements(row.get("requirements", row.get("pip_packages")), where),
    )
    if not instance.fail_to_pass:
        raise UsageError(f"{where} cannot be graded: FAIL_TO_PASS is empty")
    return instance


def rows(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) for each instance of a JSONL file or a saved `datasets` directory."""
    if path.is_dir():
        try:
            import datasets
        except ImportError as exc:
            raise UsageError(f"{path} is a directory: reading a saved dataset needs `pip install datasets`") from exc
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            split = "test" if "test" in loaded else next(iter(loaded))
            loaded = loaded[split]
        for i, row in enumerate(loaded):
            yield f"{path}[{i}]", row
        return
    if not path.is_file():
        raise UsageError(f"no such instance file: {path}")
    for lineno, row in json_lines(path):
        if not isinstance(row, dict):
            raise UsageError(f"{path}:{lineno}: an instance must be a JSON object")
        yield f"{path}:{lineno}", row


def repository(instance: SweInstance, repos: Path, where: str) -> tuple[dict[str, str], dict[str, bytes]]:
    """The instance's (text, binary) files at base_commit, history scrubbed, test_patch
    checked to apply."""
    checkout, bundle = repos / instance.instance_id, repos / f"{instance.instance_id}.bundle"
    try:
        if bundle.is_file():
            raw = tree_at(bundle, instance.base_commit)
        elif (checkout / ".git").exists():
            raw = tree_at(checkout, instance.base_commit)
        elif checkout.is_dir():
            raw = files_from_dir(checkout)
        else:
            raise UsageError(f"{where} cannot be graded: no repository {checkout}/ or {bundle}")
    except PatchError as exc:
        raise UsageError(f"{where} cannot be graded: base_commit {instance.base_commit}: {exc}") from exc
    files, assets = scrub(raw)
    try:
        apply_diff(files, instance.test_patch)
    except PatchError as exc:
        raise UsageError(f"{where} cannot be graded: test_patch does not apply at base_commit: {exc}") from exc
    return files, assets


def load_instances(
    path: Path, repos: Path, pip_args: tuple[str, ...] = ()
) -> list[tuple[SweInstance, str, dict[str, str], dict[str, bytes]]]:
    """(instance, problem statement, text files and binary files at base_commit) for every
    instance of `path`; each instance's own requirements are installed (once, cached) as
    they are loaded."""
    if not repos.is_dir():
        raise UsageError(f"no repositories directory: {repos}")
    out = []
    seen: set[str] = set()
    for where, row in rows(path):
        instance = parse_instance(row, where)
        if instance.instance_id in seen:
            raise UsageError(f"{where}: instance {instance.instance_id} appears twice")
        seen.add(instance.instance_id)
        where = f"{where}: instance {instance.instance_id}"
        files, assets = repository(instance, repos, where)
        out.append((instance, str(row["problem_statement"]), files, assets))
        instance_packages(instance.requirements, pip_args, instance.instance_id)
    if not out:
        raise UsageError(f"{path} holds no instances")
    return out
