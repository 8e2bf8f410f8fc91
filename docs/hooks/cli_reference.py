"""MkDocs hook: renders `evotrainer --help` and every command's help into docs/cli.md.

The page holds the marker `<!-- cli-reference -->`; this replaces it with the help text of
each command in the CLI's COMMANDS table (and of each subcommand of a group), exactly as
`evotrainer X --help` prints it, so the reference cannot drift from the code. The help is
rendered in this process, from the click commands themselves: starting a process per
command would cost seconds.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- cli-reference -->"


def _context(command: Any, name: str, parent: Any = None) -> Any:
    # The command's own Context class: Typer may vendor a click of its own.
    return command.context_class(command, info_name=name, parent=parent, terminal_width=100)


def _block(title: str, command: Any, ctx: Any) -> list[str]:
    return [title, "", "```text", str(command.get_help(ctx)).rstrip(), "```", ""]


def _sections() -> list[str]:
    from evotrainer.cli import COMMANDS, root_command
    from evotrainer.cli.lazy import load_command

    root = root_command()
    root_ctx = _context(root, "evotrainer")
    out = _block("## evotrainer", root, root_ctx)
    for name, spec in COMMANDS.items():
        command = load_command(name, spec)
        ctx = _context(command, name, root_ctx)
        out += _block(f"## evotrainer {name}", command, ctx)
        for sub in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
            subcommand = command.get_command(ctx, sub)
            out += _block(f"### evotrainer {name} {sub}", subcommand, _context(subcommand, sub, ctx))
    return out


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, "\n".join(_sections()))
