"""`kanin ctl`'s tables without a server: cells as rabbitmqctl shows them, one line per
row whatever a value holds, columns found by dotted paths or functions, unknown columns
refused with the usage exit status."""

from __future__ import annotations

import io
import json

import pytest

from kanin.cli.ctl.errors import EX_USAGE, CtlError
from kanin.cli.ctl.output import Columns, Output, cell

CONSUMERS = Columns(
    "list_consumers",
    ("queue_name", "consumer_tag"),
    ("active",),
    {"queue_name": "queue.name", "kind": lambda _row: "consumer"},
)
ROWS = [{"queue": {"name": "q1"}, "consumer_tag": "tab\there\nnewline", "extra": [1, True]}]


def printed(output: Output, asked: tuple[str, ...]) -> str:
    stream = io.StringIO()
    output.stream = stream
    output.table(CONSUMERS, asked, ROWS)
    return stream.getvalue()


def test_cells_read_as_rabbitmqctls() -> None:
    assert [cell(v) for v in (None, True, False, 5, "x")] == ["", "true", "false", "5", "x"]
    assert cell(["administrator", "monitoring"]) == "[administrator, monitoring]"
    assert cell({"b": 1, "a": "x"}) == '{"a":"x","b":1}'


def test_a_row_stays_one_line_of_fields() -> None:
    assert printed(Output(), ()) == "queue_name\tconsumer_tag\nq1\ttab\\there\\nnewline\n"


def test_columns_by_path_function_or_the_apis_own_field_name() -> None:
    text = printed(Output(headers=False), ("kind", "extra", "active"))
    assert text == "consumer\t[1, true]\t\n"  # active: an info item this server lacks


def test_json_keeps_the_values_and_names_the_columns() -> None:
    assert json.loads(printed(Output(as_json=True), ("queue_name", "extra"))) == [
        {"queue_name": "q1", "extra": [1, True]}
    ]


def test_an_unknown_column_is_a_usage_error_listing_the_known_ones() -> None:
    with pytest.raises(CtlError) as error:
        CONSUMERS.chosen(["colour"], ROWS)
    assert error.value.exit_code == EX_USAGE
    assert str(error.value).startswith("unknown column(s) colour; columns: active, consumer_tag")
