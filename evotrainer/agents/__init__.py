"""Agents as trainers: the MCP server (`evotrainer mcp`) that lets an agent drive
evotrainer through tools. Imported only by that command: the `mcp` SDK loads nothing
else of ours."""
