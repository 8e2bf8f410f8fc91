"""The few git operations SWE grading needs, on in-memory trees (path -> text).

Diffs are applied with `git apply`, the tool SWE-bench uses, in a scratch directory
holding only the files the diff names. `git apply` refuses paths outside the directory
and refuses to write through a symbolic link or into .git, so an untrusted diff (the
agent's) cannot touch anything else on the host; a diff that does not apply changes
nothing. GNU
`patch`, SWE-bench's fallback, is not used: it has had path-traversal and ed-script
holes, and it runs here outside the sandbox.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from evotrainer.sandbox import files_from_dir

_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "HOME": "/nonexistent", "LANG": "C"}


class PatchError(Exception):
    """A diff that `git apply` rejected; the message is git's."""


def _git(args: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**_GIT_ENV, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CEILING_DIRECTORIES": str(cwd.parent)}
    return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, env=env, check=False)


def apply_diff(files: Mapping[str, str], diff: str) -> dict[str, str]:
    """`files` with the unified diff applied (as `git apply -p1`); PatchError if it does not apply."""
    if not diff.strip():
        return dict(files)
    # Never a file under .git: in the scratch directory it would make git read a
    # repository (and its config, which can run commands) that the agent wrote.
    named = [p for p in files if p in diff and ".git" not in PurePosixPath(p).parts]
    with tempfile.TemporaryDirectory(prefix="evotrainer-apply-") as tmp:
        root = Path(tmp, "tree")
        root.mkdir()
        for path in named:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[path])
        result = _git(["apply", "--whitespace=nowarn", "-"], root, diff.encode())
        if result.returncode != 0:
            raise PatchError(result.stderr.decode(errors="replace").strip() or "git apply failed")
        after = decoded(files_from_dir(root))
    out = {p: c for p, c in files.items() if p not in named}
    out.update(after)
    return out


def decoded(files: Mapping[str, bytes]) -> dict[str, str]:
    """The files that are UTF-8 text (binary ones are left out of in-memory trees)."""
    out = {}
    for path, data in files.items():
        try:
            out[path] = data.decode()
        except UnicodeDecodeError:
            continue
    return out


def tree_at(source: Path, commit: str) -> dict[str, bytes]:
    """Every file of `commit` in a git checkout or bundle at `source`; PatchError when git cannot."""
    with tempfile.TemporaryDirectory(prefix="evotrainer-tree-") as tmp:
        if source.is_file():
            # A bundle is a packed repository: clone it (bare) to read from it.
            repo = Path(tmp, "repo.git")
            cloned = _git(["clone", "--quiet", "--bare", str(source.resolve()), str(repo)], Path(tmp))
            if cloned.returncode != 0:
                raise PatchError(cloned.stderr.decode(errors="replace").strip())
        else:
            repo = source.resolve()
        result = _git(["archive", "--format=tar", commit], repo)
    if result.returncode != 0:
        raise PatchError(result.stderr.decode(errors="replace").strip() or f"git archive {commit} failed")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                if handle is not None:
                    files[member.name] = handle.read()
    return files
