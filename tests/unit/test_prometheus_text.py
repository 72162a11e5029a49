"""The Prometheus text format as kanin writes it (prometheus/text.py)."""

from __future__ import annotations

import math

from kanin.prometheus.text import Family, counter, escape_label_value, format_value, gauge, render


def test_label_values_escape_backslash_quote_and_newline() -> None:
    assert escape_label_value('a"b') == 'a\\"b'
    assert escape_label_value("a\\b") == "a\\\\b"
    assert escape_label_value("a\nb") == "a\\nb"
    assert escape_label_value('\\"\n') == '\\\\\\"\\n'


def test_a_family_is_help_then_type_then_its_samples() -> None:
    family = Family("kanin_x", "gauge", "Line one\nand a \\ backslash")
    family.add(1, vhost="/", queue='q "1"').add(2.5, vhost="/", queue="q\n2")
    assert render([family, counter("kanin_y_total", "Y", 7)]) == (
        "# HELP kanin_x Line one\\nand a \\\\ backslash\n"
        "# TYPE kanin_x gauge\n"
        'kanin_x{vhost="/",queue="q \\"1\\""} 1\n'
        'kanin_x{vhost="/",queue="q\\n2"} 2.5\n'
        "# HELP kanin_y_total Y\n"
        "# TYPE kanin_y_total counter\n"
        "kanin_y_total 7\n"
    )


def test_values() -> None:
    assert format_value(3) == "3"
    assert format_value(True) == "1"
    assert format_value(0.25) == "0.25"
    assert format_value(math.nan) == "NaN"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"


def test_nothing_to_say_is_an_empty_body() -> None:
    assert render([]) == ""
    assert render([gauge("kanin_z", "Z")]) == "# HELP kanin_z Z\n# TYPE kanin_z gauge\n"
