"""Per-instance Python packages: an instance's own requirements, installed once and cached.

An instance may list what its tests need beyond the project's interpreter in
`requirements` (or `pip_packages`, the name SWE-bench's specs use): a JSON list of pip
requirement strings or one per line. They are installed with the project's own pip into
`$EVOTRAINER_HOME/swe/envs/<key>/` (key: interpreter version, requirements, pip options)
the first time an instance needs them, then reused; grading binds that directory
read-only at /opt/evotrainer-instance and puts it on PYTHONPATH in the sandbox.

Wheels only (`--only-binary=:all:`): installing from a source distribution runs its
build code on the host, outside the sandbox. The install needs the package index (or
the `--find-links` directory given in `SweConfig.pip_args`); without it the instance is
refused with pip's last line, never graded without its packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evotrainer.config import home
from evotrainer.errors import UsageError


def parse_requirements(value: object, where: str) -> tuple[str, ...]:
    """A `requirements` field as pip requirement strings (a list, or text one per line)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: requirements must be a list of pip requirement strings")
    return tuple(v.strip() for v in value)


def instance_packages(requirements: tuple[str, ...], pip_args: tuple[str, ...], instance_id: str) -> Path | None:
    """The instance's package directory, or None when it needs nothing beyond the project's."""
    return environment(requirements, pip_args, instance_id) if requirements else None


def environment(requirements: tuple[str, ...], pip_args: tuple[str, ...], instance_id: str) -> Path:
    """The directory holding `requirements`, installed now if no earlier run did."""
    key = hashlib.sha256(json.dumps([sys.version, sorted(requirements), list(pip_args)]).encode()).hexdigest()[:20]
    target = home() / "swe" / "envs" / key
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
            "--only-binary=:all:", "--target", str(building), *pip_args, *requirements]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UsageError(f"instance {instance_id} cannot be graded: its requirements did not install: {last}")
    building.chmod(0o755)  # readable by the sandbox's private uid
    try:
        # A rename is atomic: a concurrent builder of the same key either wins or finds ours.
        os.rename(building, target)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
    return target
