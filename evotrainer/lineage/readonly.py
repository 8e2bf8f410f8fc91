"""`evotrainer sql`: run one query against the lineage with no way to write.

Defence in depth, each layer enough for the common mistakes and together for the
deliberate ones:
1. one statement only, and it must start as a query does (SELECT, WITH, VALUES, TABLE,
   EXPLAIN, SHOW): anything else is refused before it reaches the server;
2. the extended query protocol, which the server refuses to run more than one command in;
3. a READ ONLY transaction: INSERT, UPDATE, DELETE, DDL, COPY FROM, nextval() and other
   writing functions fail in the server;
4. no calls to functions that change settings, read server files or signal backends,
   found as the server's lexer reads the query (a quoted or qualified name, a call after a
   literal or comment that holds quotes or dashes; unicode-escaped names are refused);
5. the `evotrainer_reader` role (SELECT only, no superuser file or signal functions) for
   the duration of the transaction, when the connecting user may assume it;
6. a statement timeout, so a runaway query cannot hold the database.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from evotrainer.errors import UsageError

READER_ROLE = "evotrainer_reader"
_ALLOWED_START = re.compile(r"^\s*(\(\s*)*(select|with|values|table|explain|show)\b", re.I)
# Functions that change settings (set_config can switch the role back to a superuser
# session's own), read server files or signal other backends. The role and the
# read-only transaction stop most of them; naming them stops them for superuser sessions.
_FORBIDDEN_CALL = re.compile(
    r"\b(set_config|pg_read_\w*|pg_ls_\w*|pg_stat_file|lo_\w+|pg_terminate_backend|pg_cancel_backend"
    r"|pg_reload_conf|pg_rotate_logfile|pg_promote|pg_switch_wal|dblink\w*|pg_file_\w+)\s*\(",
    re.I,
)


class ReadOnlyViolation(UsageError):
    """The query would write, or is not a single query."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    role: str


def _single_query(query: str) -> str:
    bare, text = _lex(query)
    bare, text = bare.strip().rstrip(";").strip(), text.strip().rstrip(";").strip()
    if not bare:
        raise UsageError("empty query")
    if ";" in bare:
        raise ReadOnlyViolation("one statement at a time: the query contains ';'")
    if forbidden := _FORBIDDEN_CALL.search(bare):
        raise ReadOnlyViolation(f"{forbidden.group(1)}() is refused: it changes settings or reaches the server")
    if not _ALLOWED_START.match(bare):
        word = bare.split(None, 1)[0].upper()
        raise ReadOnlyViolation(f"{word} is refused: `evotrainer sql` only runs read-only queries")
    return text


_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _lex(text: str) -> tuple[str, str]:
    """The query as the server's lexer sees its code, and the query without its comments
    (what is sent). In the code each string literal ('...', E'...', $tag$...$tag$) is '',
    each comment (-- to the line's end, nested /* */) a space, and each quoted identifier
    its name ("set_config" calls set_config, so the checks above must see it). Unicode-
    escaped names and strings (U&"...") are refused: their escapes could spell any name."""
    out: list[str] = []
    sent: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c, pair = text[i], text[i:i + 2]
        if pair == "--":
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
            sent.append(" ")
        elif pair == "/*":
            depth, i = 1, i + 2
            while i < n and depth:
                depth += {"/*": 1, "*/": -1}.get(text[i:i + 2], 0)
                i += 2 if text[i:i + 2] in ("/*", "*/") else 1
            out.append(" ")
            sent.append(" ")
        elif c in "Uu" and text[i + 1:i + 3] in ('&"', "&'"):
            raise ReadOnlyViolation("unicode-escaped names and strings (U&) are refused")
        elif c == "'":
            escapes = i > 0 and text[i - 1] in "Ee" and (i < 2 or not _in_name(text[i - 2]))
            end = _end_of_string(text, i + 1, escapes)
            out.append("''")
            sent.append(text[i:end])
            i = end
        elif c == '"':
            end = i + 1
            while end < n and not (text[end] == '"' and text[end + 1:end + 2] != '"'):
                end += 2 if text[end:end + 2] == '""' else 1
            out.append(text[i + 1:end].replace('""', '"'))
            sent.append(text[i:end + 1])
            i = end + 1
        elif c == "$" and (tag := _DOLLAR_TAG.match(text, i)) and not (i and _in_name(text[i - 1])):
            found = text.find(tag.group(0), tag.end())
            end = n if found < 0 else found + len(tag.group(0))
            out.append("''")
            sent.append(text[i:end])
            i = end
        else:
            out.append(c)
            sent.append(c)
            i += 1
    return "".join(out), "".join(sent)


def _in_name(c: str) -> bool:
    return c.isalnum() or c in "_$"


def _end_of_string(text: str, i: int, escapes: bool) -> int:
    """Just past the quote that closes a string literal opened before `i` ('' is a quote
    inside it; in an E'...' string so is \\')."""
    while i < len(text):
        if escapes and text[i] == "\\":
            i += 2
        elif text[i] == "'":
            if text[i + 1:i + 2] != "'":
                return i + 1
            i += 2
        else:
            i += 1
    return i


@contextmanager
def read_only(conn: psycopg.Connection[Any], timeout_ms: int = 30_000) -> Iterator[str]:
    """A READ ONLY transaction with a statement timeout, as the reader role when the
    connecting user may assume it (layers 3, 5 and 6 above); yields the role used. Any
    code reading through `conn` inside it (library functions included) cannot write."""
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
        yield _assume_reader(conn)


def run_query(
    conn: psycopg.Connection[Any], query: str, timeout_ms: int = 30_000,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> QueryResult:
    """Run one read-only query; `params` fill its %s (or %(name)s) placeholders, so values
    never need quoting into the text."""
    text = _single_query(query)
    with read_only(conn, timeout_ms) as role:
        try:
            cursor = conn.execute(text, params, prepare=True)
        except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege) as exc:
            raise ReadOnlyViolation(f"refused: {_first_line(exc)}") from None
        except pg_errors.QueryCanceled:
            raise UsageError(f"query cancelled after {timeout_ms} ms (statement timeout)") from None
        except psycopg.Error as exc:
            raise UsageError(f"query failed: {_first_line(exc)}") from None
        columns = [c.name for c in cursor.description or []]
        rows = cursor.fetchall() if cursor.description else []
    return QueryResult(columns, rows, role)


def _assume_reader(conn: psycopg.Connection[Any]) -> str:
    """Switch to the reader role for this transaction if allowed; report the role used."""
    with conn.transaction():  # a savepoint: a refused SET ROLE must not abort the query
        try:
            conn.execute(f"SET LOCAL ROLE {READER_ROLE}")
            return READER_ROLE
        except (pg_errors.InsufficientPrivilege, pg_errors.UndefinedObject):
            pass
    row = conn.execute("SELECT current_user").fetchone()
    return str(row[0]) if row else "?"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
