"""What `kanin ctl` prints: rabbitmqctl's tab-separated tables (a header line, then a row
per object) for people and shell scripts, or JSON (--json) for programs; and the columns
of each list_* command, named as rabbitmqctl's info items."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from kanin.cli.ctl.errors import EX_USAGE, CtlError

# A column's value in an API object: a dotted path into it, or a function of it.
Field = str | Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Columns:
    """A list_* command's columns: the ones shown without column arguments, the
    rabbitmqctl info items it accepts, and where those differ from the API's names."""

    command: str
    defaults: tuple[str, ...]
    known: tuple[str, ...] = ()
    fields: dict[str, Field] = field(default_factory=dict)

    def chosen(self, asked: Sequence[str], rows: list[dict[str, Any]]) -> list[str]:
        """The columns asked for (the defaults if none); a usage error for a name that is
        neither an info item nor a field of any object the server sent."""
        if not asked:
            return list(self.defaults)
        offered = {*self.defaults, *self.known, *self.fields}
        seen = {key for row in rows for key in row}
        unknown = [name for name in asked if name not in offered and name not in seen]
        if unknown:
            raise CtlError(
                f"unknown column(s) {', '.join(unknown)}; "
                f"columns: {', '.join(sorted(offered | seen))}",
                EX_USAGE,
            )
        return list(asked)

    def value(self, row: dict[str, Any], column: str) -> Any:
        where = self.fields.get(column, column)
        if callable(where):
            return where(row)
        found: Any = row
        for part in where.split("."):
            if not isinstance(found, dict) or part not in found:
                return None  # a field the server does not report
            found = found[part]
        return found


@dataclass
class Output:
    as_json: bool = False
    headers: bool = True
    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stdout)

    def done(self, message: str) -> None:
        """What a change did, for a person; nothing for --json or --quiet."""
        if not (self.as_json or self.quiet):
            print(message, file=self.stream)

    def document(self, value: Any, text: str) -> None:
        """A single answer: JSON, or its text form."""
        print(json.dumps(value, indent=2) if self.as_json else text, file=self.stream)

    def table(self, columns: Columns, asked: Sequence[str], rows: list[dict[str, Any]]) -> None:
        names = columns.chosen(asked, rows)
        picked = [{name: columns.value(row, name) for name in names} for row in rows]
        if self.as_json:
            print(json.dumps(picked, indent=2), file=self.stream)
            return
        if self.headers:
            print("\t".join(names), file=self.stream)
        for row in picked:
            print("\t".join(_escaped(cell(row[name])) for name in names), file=self.stream)


def cell(value: Any) -> str:
    """One value as rabbitmqctl shows it: true/false, [a, b] for lists, JSON for tables."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(cell(item) for item in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def _escaped(text: str) -> str:
    """Tabs and newlines escaped, so that a row stays one line of tab-separated fields."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
