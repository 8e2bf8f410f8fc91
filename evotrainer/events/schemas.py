"""JSON Schemas generated from the event models, and fast validators compiled from them.

`schemas/<Type>.v<N>.json` in the repository is an export of `schema_for`; a test fails
when the files drift from the models. Validation on the append path uses fastjsonschema's
compiled validators (generated Python, a few microseconds per payload) over exactly these
schemas, so what is documented is what is enforced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema

from evotrainer.errors import InvalidPayloadError
from evotrainer.events.base import Event, all_models, model_for

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_for(model: type[Event]) -> dict[str, Any]:
    """The JSON Schema of one payload model, with its type and version named in it."""
    schema = model.model_json_schema()
    schema["$schema"] = SCHEMA_DIALECT
    schema["$id"] = f"evotrainer:{model.event_type}.v{model.schema_version}"
    schema["title"] = model.event_type
    schema["x-schema-version"] = model.schema_version
    return schema


def schema_filename(model: type[Event]) -> str:
    return f"{model.event_type}.v{model.schema_version}.json"


def render(schema: dict[str, Any]) -> str:
    """The exact text written to schemas/: stable key order, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export(directory: Path) -> list[Path]:
    """Write every (type, version) schema into `directory`; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for model in all_models():
        path = directory / schema_filename(model)
        path.write_text(render(schema_for(model)), encoding="utf-8")
        written.append(path)
    return written


@cache
def _compiled(event_type: str, version: int) -> Callable[[Any], Any]:
    schema = schema_for(model_for(event_type, version))
    # fastjsonschema understands draft-07; the generated schemas use nothing newer
    # except the $defs location, which it resolves as a plain JSON pointer.
    schema = {**schema, "$schema": "http://json-schema.org/draft-07/schema#"}
    return fastjsonschema.compile(schema)  # type: ignore[no-any-return]


def validate(event_type: str, version: int, payload: Any) -> None:
    """Refuse a payload that does not satisfy its schema, naming the offending field."""
    if not isinstance(payload, dict):
        raise InvalidPayloadError(event_type, f"payload must be a JSON object, not {type(payload).__name__}")
    try:
        _compiled(event_type, version)(payload)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise InvalidPayloadError(event_type, exc.message) from None
