"""Commands loaded when they run: the root group, and parameters converted without pydantic.

`evotrainer --help` lists every command from evotrainer.cli.COMMANDS without importing
one; a command's module is imported when the command runs. Typer (0.2x) converts each
parameter's value through a pydantic TypeAdapter built on first use, and importing
pydantic and building the adapters took a third of a reading command's start; a text
option given as text, an unset option or a number left at its default needs none of it,
so those values pass through as they are, and only any other value (an integer typed on
the command line, a file name to open) builds Typer's own conversion.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import typer
from typer.core import TyperGroup


class CommandSpec(NamedTuple):
    """Where a command lives: `attribute` of `module` is a command function or a Typer
    sub-app; `summary` is the short help `evotrainer --help` shows for it."""

    module: str
    attribute: str
    summary: str


def load_command(name: str, spec: CommandSpec) -> Any:
    """The click command `name` for `spec`, its module imported now."""
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    # Mounted on a parent as before, so Typer builds it as a subcommand (no completion
    # options of its own); the parent never runs.
    parent = typer.Typer(add_completion=False)
    if isinstance(target, typer.Typer):
        parent.add_typer(target, name=name)
        command = typer.main.get_command(parent).commands[name]  # type: ignore[attr-defined]
    else:
        parent.command(name)(target)
        command = typer.main.get_command(parent)  # one command and no callback: the command itself
    _tune(command)
    return command


def _tune(command: Any) -> None:
    """Plain-text help (sub-apps default to Rich, whose import costs more than a command's
    whole start) and deferred conversion, on a command and everything under it."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    # The --help option is made on first request, from a context; made now, it is tuned too.
    for param in [*command.params, command.get_help_option(command.context_class(command))]:
        _defer(param)
    for sub in getattr(command, "commands", {}).values():
        _tune(sub)


def _defer(param: Any) -> None:
    # Only Typer versions that convert through pydantic have this lazily built slot.
    if hasattr(param, "get_runtime_param") and getattr(param, "_runtime_param", False) is None:
        param._runtime_param = DeferredConversion()


class DeferredConversion:
    """A parameter's conversion until a value needs Typer's own: the values below come
    out of it unchanged, so they are passed through without building it."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multiple = param.multiple or param.nargs == -1
        info = param.type_descriptor.parameter_info
        annotation = param.type_descriptor.annotation
        plain = info.parser is None and info.min is None and info.max is None
        if plain and not multiple and (value is None or type(value) is annotation and annotation in (str, int)):
            return value
        param._runtime_param = None  # Typer builds its conversion on the next request
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


class LazyGroup(TyperGroup):
    """The root group: lists its commands without importing them, imports one when it runs."""

    def __init__(self, specs: dict[str, CommandSpec], **attrs: Any) -> None:
        super().__init__(**attrs)
        self.specs = specs

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.specs)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.specs:
            return None
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name, self.specs[cmd_name])
        return self.commands[cmd_name]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _defer(option)
        return option

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(len(name) for name in self.specs)
        with formatter.section("Commands"):
            formatter.write_dl([(name, short_help(spec.summary, limit)) for name, spec in self.specs.items()])


def short_help(summary: str, limit: int) -> str:
    """What click shows of a command's help in a list: its first sentence, cut to fit."""
    from typer._click.utils import make_default_short_help

    return make_default_short_help(summary, limit)
