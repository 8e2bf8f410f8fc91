"""JSON Schemas generated from the event models, and fast validators compiled from them.

`schemas/<Type>.v<N>.json` in the repository is an export of `schema_for`; a test fails
when the files drift from the models. Validation on the append path uses jsonschema-rs
(compiled Rust, a fraction of a microsecond per payload; it runs for every appended
event) over exactly these schemas, so what is documented is what is enforced. A valid
payload then gets the schema's defaults for the fields it left out, as the model would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema_rs

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


Filler = Callable[[Any], None]


class _Compiled(NamedTuple):
    validator: Any  # a jsonschema_rs validator
    fill_defaults: Filler | None


@cache
def _compiled(event_type: str, version: int) -> _Compiled:
    schema = schema_for(model_for(event_type, version))
    return _Compiled(jsonschema_rs.validator_for(schema), _defaults_filler(schema, schema.get("$defs", {}), ()))


def _defaults_filler(node: dict[str, Any], defs: dict[str, Any], within: tuple[str, ...]) -> Filler | None:
    """A function that gives a valid value the defaults its schema declares for the
    properties it left out, at every depth (through $ref, array items, map values and
    the branches of anyOf/oneOf/allOf), or None when the schema declares none.

    Two simplifications, neither reachable by today's schemas (tests pin the cases that
    are): every anyOf/oneOf branch with defaults fills a dict value, not only the branch
    it matched; and a model reached again inside itself (a recursive $ref) is filled at
    its first level only."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in within or name not in defs:  # a recursive model fills once per level it is reached
            return None
        return _defaults_filler(defs[name], defs, (*within, name))
    fillers: list[Filler] = []
    properties = node.get("properties") or {}
    defaults = {key: spec["default"] for key, spec in properties.items() if "default" in spec}
    nested = {key: f for key, spec in properties.items() if (f := _defaults_filler(spec, defs, within))}
    if defaults or nested:
        def fill_object(value: Any) -> None:
            if isinstance(value, dict):
                for key, default in defaults.items():
                    if key not in value:
                        value[key] = copy.deepcopy(default)
                for key, fill in nested.items():
                    if key in value:
                        fill(value[key])
        fillers.append(fill_object)
    for key, (container, members) in _MEMBERS.items():
        inner = node.get(key)
        if isinstance(inner, dict) and (fill_inner := _defaults_filler(inner, defs, within)):
            fillers.append(_each_member(fill_inner, container, members))
    for key in ("anyOf", "oneOf", "allOf"):
        fillers += [f for branch in node.get(key, []) if (f := _defaults_filler(branch, defs, within))]
    if not fillers:
        return None
    if len(fillers) == 1:
        return fillers[0]

    def fill_all(value: Any) -> None:
        for fill in fillers:
            fill(value)
    return fill_all


# The schema keywords whose subschema applies to each member of a container: array items,
# and the values of a map (an object with no fixed properties).
_MEMBERS: dict[str, tuple[type, Callable[[Any], Iterable[Any]]]] = {
    "items": (list, iter),
    "additionalProperties": (dict, dict.values),
}


def _each_member(fill: Filler, container: type, members: Callable[[Any], Iterable[Any]]) -> Filler:
    def fill_members(value: Any) -> None:
        if isinstance(value, container):
            for member in members(value):
                fill(member)
    return fill_members


def validate(event_type: str, version: int, payload: Any) -> None:
    """Refuse a payload that does not satisfy its schema, naming the offending field;
    fill in the defaults of a valid one (in place)."""
    if not isinstance(payload, dict):
        raise InvalidPayloadError(event_type, f"payload must be a JSON object, not {type(payload).__name__}")
    compiled = _compiled(event_type, version)
    try:
        compiled.validator.validate(payload)
    except jsonschema_rs.ValidationError as exc:
        raise InvalidPayloadError(event_type, f"{_path(exc.instance_path)}: {exc.message}") from None
    except (ValueError, TypeError) as exc:
        # A Python value that is not JSON at all where the schema looks (a datetime, a set,
        # a non-string key): jsonschema-rs cannot convert it.
        raise InvalidPayloadError(event_type, f"data holds a value that is not JSON: {exc}") from None
    if compiled.fill_defaults is not None:
        compiled.fill_defaults(payload)


def _path(parts: list[str | int]) -> str:
    """data.findings[0].message, the way the payload would be written in Python."""
    return "data" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)
