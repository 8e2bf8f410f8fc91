"""Runs the real `evotrainer` CLI in-process (faster than a subprocess per call)."""

from __future__ import annotations

from evotrainer import cli


def main(*argv: str) -> int:
    return cli.main(list(argv))
