"""The query options every listing takes, as RabbitMQ's management plugin reads them:
`columns` (a comma-separated list of fields; `a.b` picks field b of object a), `sort`
(a field, dotted likewise), `sort_reverse`, and `page` with `page_size`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kanin.mgmt.errors import ApiError, bad_request

MAX_PAGE_SIZE = 500  # RabbitMQ's limit


def parse_columns(option: str | None) -> list[list[str]] | None:
    if not option:
        return None
    return [column.split(".") for column in option.split(",") if column]


def select(item: dict[str, Any], columns: list[list[str]]) -> dict[str, Any]:
    """Only the given fields of item, nested ones in their objects."""
    chosen: dict[str, Any] = {}
    for path in columns:
        _copy_path(item, chosen, path)
    return chosen


def _copy_path(source: Mapping[str, Any], target: dict[str, Any], path: list[str]) -> None:
    head, rest = path[0], path[1:]
    if head not in source:
        return
    value = source[head]
    if not rest or not isinstance(value, Mapping):
        target[head] = value
        return
    inner = target.setdefault(head, {})
    if isinstance(inner, dict):
        _copy_path(value, inner, rest)


def _sort_key(item: dict[str, Any], path: list[str]) -> tuple[int, Any]:
    value: Any = item
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    # Missing values first, then numbers, then everything else as text.
    if value is None:
        return (0, 0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, value)
    return (2, str(value))


def apply_query(items: list[dict[str, Any]], query: Mapping[str, str]) -> Any:
    """A listing as the query asks: sorted, filtered to columns, maybe one page of it."""
    sort = query.get("sort")
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda item: _sort_key(item, path))
    if query.get("sort_reverse", "").lower() == "true":
        items = list(reversed(items))
    columns = parse_columns(query.get("columns"))
    if columns is not None:
        items = [select(item, columns) for item in items]
    if "page" not in query:
        return items
    return _page(items, query)


def _page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    try:
        page = int(query["page"])
        size = int(query.get("page_size", "100"))
    except ValueError:
        raise bad_request("Pagination parameters are invalid") from None
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise bad_request("Pagination parameters are invalid")
    pages = max(1, math.ceil(len(items) / size))
    if page > pages:
        raise ApiError(
            400,
            "page_out_of_range",
            f"Page out of range, page: {page} page size: {size}, len: {len(items)}",
        )
    chosen = items[(page - 1) * size : page * size]
    return {
        "filtered_count": len(items),
        "item_count": len(chosen),
        "items": chosen,
        "page": page,
        "page_count": pages,
        "page_size": size,
        "total_count": len(items),
    }


def apply_columns(item: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
    """One object filtered to the asked-for columns."""
    columns = parse_columns(query.get("columns"))
    return item if columns is None else select(item, columns)
