"""The Prometheus text exposition format, version 0.0.4: a family's HELP and TYPE lines,
then its samples, one a line, label values escaped (backslash, double quote, newline)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric: its name, type (gauge, counter or untyped), help text and samples."""

    name: str
    kind: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> Family:
        self.samples.append((tuple(labels.items()), value))
        return self


def gauge(name: str, help_text: str, value: float | None = None) -> Family:
    family = Family(name, "gauge", help_text)
    return family if value is None else family.add(value)


def counter(name: str, help_text: str, value: float) -> Family:
    return Family(name, "counter", help_text).add(value)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            if labels:
                inner = ",".join(f'{key}="{escape_label_value(text)}"' for key, text in labels)
                lines.append(f"{family.name}{{{inner}}} {format_value(value)}")
            else:
                lines.append(f"{family.name} {format_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""
