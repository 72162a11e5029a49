"""The management API's pure parts: listing options, basic auth and tags, RabbitMQ
password hashes, user and body values, binding keys, JSON shaping, definitions reading."""

from __future__ import annotations

import base64
import datetime

import pytest

from kanin.config import BrokerConfig
from kanin.core.auth import check_password, hash_password
from kanin.core.broker import Broker
from kanin.mgmt.access import checked_hash
from kanin.mgmt.auth import authenticate, parse_basic
from kanin.mgmt.body import tags_of, to_bool, to_int
from kanin.mgmt.columns import apply_query, select
from kanin.mgmt.definitions_doc import DefinitionsProblem, read
from kanin.mgmt.errors import ApiError
from kanin.mgmt.messages import encode_payload
from kanin.mgmt.shapes import jsonable, properties_key
from kanin.testing.clock import FakeScheduler

# Made by RabbitMQ 3.10.8 for users whose passwords were "guest" and "pw".
RABBITMQ_GUEST_HASH = "fBJ1jW2yz5k5q/gqxhsh5TWi3P7Si8/6L8bvKXbwyKaEagbU"
RABBITMQ_PW_HASH = "n5U6vxv1VrsB+PLNNAeRsCIdERQFIGY/QqX0BWydyeUIKG89"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_rabbitmq_hashes_check_against_their_passwords() -> None:
    assert check_password("guest", RABBITMQ_GUEST_HASH)
    assert check_password("pw", RABBITMQ_PW_HASH)
    assert not check_password("guest", RABBITMQ_PW_HASH)
    assert checked_hash(RABBITMQ_PW_HASH, "rabbit_password_hashing_sha256") == RABBITMQ_PW_HASH
    assert checked_hash(hash_password("x"), None)  # the algorithm may be left out


@pytest.mark.parametrize(
    ("password_hash", "algorithm", "problem"),
    [
        ("abc", None, "not_base64"),
        (base64.b64encode(b"short").decode(), None, "not the 36 of"),
        (RABBITMQ_PW_HASH, "rabbit_password_hashing_md5", "unsupported hashing_algorithm"),
    ],
)
def test_hashes_kanin_cannot_check_are_refused(
    password_hash: str, algorithm: str | None, problem: str
) -> None:
    with pytest.raises(ApiError) as refused:
        checked_hash(password_hash, algorithm)
    assert refused.value.status == 400 and problem in refused.value.reason


def test_basic_auth_header_parsing() -> None:
    assert parse_basic(_basic("guest", "a:b")) == ("guest", "a:b")
    assert parse_basic(None) is None
    assert parse_basic("Bearer xyz") is None
    assert parse_basic("Basic !!!") is None
    assert parse_basic("Basic " + base64.b64encode(b"nocolon").decode()) is None


def _broker() -> Broker:
    broker = Broker(BrokerConfig(), FakeScheduler())
    broker.users.add_user("plain", "pw", ())
    broker.users.add_user("boss", "pw", ("administrator",))
    return broker


def test_authenticate_as_rabbitmq_does() -> None:
    broker = _broker()
    assert authenticate(broker, _basic("boss", "pw"), "10.1.2.3").name == "boss"
    assert authenticate(broker, _basic("guest", "guest"), "::1").name == "guest"
    cases = [
        (_basic("guest", "guest"), "10.1.2.3", "User can only log in via localhost"),
        (_basic("boss", "wrong"), "127.0.0.1", "Login failed"),
        (None, "127.0.0.1", "Login failed"),
        (_basic("plain", "pw"), "127.0.0.1", "Not management user"),
    ]
    for header, remote, reason in cases:
        with pytest.raises(ApiError) as refused:
            authenticate(broker, header, remote)
        assert (refused.value.status, refused.value.reason) == (401, reason)
        assert refused.value.response().headers["WWW-Authenticate"] == (
            'Basic realm="RabbitMQ Management"'
        )


def test_columns_pick_fields_and_nested_fields() -> None:
    item = {"name": "q", "messages": 3, "arguments": {"x-max-length": 5, "x-other": 1}}
    columns = [["name"], ["arguments", "x-max-length"], ["absent"]]
    assert select(item, columns) == {"name": "q", "arguments": {"x-max-length": 5}}
    assert select(item, [["name", "deeper"]]) == {"name": "q"}  # not an object: as it is


def test_sorting_and_paging() -> None:
    items = [{"name": n, "messages": m} for n, m in (("b", 2), ("a", None), ("c", 10))]
    by_count = apply_query(items, {"sort": "messages", "columns": "name"})
    assert by_count == [{"name": "a"}, {"name": "b"}, {"name": "c"}]  # missing first
    reversed_ = apply_query(items, {"sort": "name", "sort_reverse": "true", "columns": "name"})
    assert [i["name"] for i in reversed_] == ["c", "b", "a"]
    page = apply_query(items, {"page": "2", "page_size": "2", "sort": "name"})
    assert (page["page"], page["page_count"], page["item_count"]) == (2, 2, 1)
    assert page["items"] == [{"name": "c", "messages": 10}]
    for bad in ({"page": "x"}, {"page": "0"}, {"page": "3", "page_size": "2"}):
        with pytest.raises(ApiError) as refused:
            apply_query(items, bad)
        assert refused.value.status == 400


def test_values_as_rabbitmqadmin_sends_them() -> None:
    assert to_bool({"durable": "true"}, "durable", False) is True
    assert to_bool({"durable": False}, "durable", True) is False
    assert to_bool({}, "durable", True) is True
    assert to_int({"count": "12"}, "count") == 12
    assert tags_of("administrator, monitoring") == ("administrator", "monitoring")
    assert tags_of(["management"]) == ("management",) and tags_of("") == ()
    for bad in (lambda: to_bool({"d": "maybe"}, "d", False), lambda: to_int({"c": "x"}, "c")):
        with pytest.raises(ApiError):
            bad()


def test_properties_keys_name_bindings_unambiguously() -> None:
    assert properties_key("a.b", {}) == "a.b"
    assert properties_key("", {}) == "~"
    with_args = properties_key("a", {"x": 1})
    assert with_args.startswith("a~") and with_args != properties_key("a", {"x": 2})
    assert properties_key("a", {"x": 1, "y": 2}) == properties_key("a", {"y": 2, "x": 1})
    assert properties_key("a~b/c", {}) == "a%7Eb%2Fc"


def test_field_values_become_json() -> None:
    moment = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    assert jsonable({"b": b"bytes", "t": moment, "l": [b"x", 1]}) == {
        "b": "bytes",
        "t": int(moment.timestamp()),
        "l": ["x", 1],
    }
    assert encode_payload(b"text", "auto") == ("text", "string")
    assert encode_payload(b"\xff", "auto") == ("/w==", "base64")
    assert encode_payload(b"text", "base64") == ("dGV4dA==", "base64")


def test_definitions_reading_names_the_first_problem() -> None:
    broker = _broker()
    queue = {"name": "q", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
    plan = read({"queues": [queue], "vhosts": [{"name": "v"}]}, broker)
    assert plan.vhosts == ["v"] and plan.queues[0]["name"] == "q"
    problems = [
        ([], "not a definitions document"),
        ({"queues": {}}, '"queues" is not a list'),
        ({"queues": [dict(queue, vhost="v9")]}, "queues[0] ('q' in vhost 'v9'): no vhost 'v9'"),
        ({"queues": [{"name": "q", "vhost": "/"}]}, "queues[0] ('q' in vhost '/'): lacks"),
        ({"users": [{"name": "u", "password_hash": "abc"}]}, "users[0] ('u'): not_base64"),
        ({"permissions": [{"user": "nobody", "vhost": "/"}]}, "no user 'nobody'"),
    ]
    for document, problem in problems:
        with pytest.raises(DefinitionsProblem) as refused:
            read(document, broker)
        assert problem in str(refused.value)
