"""The dashboard (`evotrainer ui`) and the static report (`evotrainer report`).

app.py serves pages read through the read-only path of `evotrainer sql`; reads.py gathers
what each page shows from the library; svg.py draws the lineage and the curves; render.py
holds the templates and where links point; report.py writes a report to disk. Starlette
and uvicorn are imported only here, never by the rest of the CLI.
"""
