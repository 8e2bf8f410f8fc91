"""`python -m evotrainer ...` is the `evotrainer` command (handy where the script is not on PATH)."""

from evotrainer.cli import run

run()
