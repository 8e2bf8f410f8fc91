"""Mounts command groups that live with their subsystems, when those are importable."""

from __future__ import annotations

import importlib

import typer

# (module, command name): groups owned by other subsystems' modules.
_GROUPS = [("evotrainer.cli.domains", "domains")]


def mount(app: typer.Typer) -> None:
    for module_name, name in _GROUPS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        app.add_typer(module.app, name=name)
