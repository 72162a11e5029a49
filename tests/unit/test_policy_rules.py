"""Policies without a broker: how one is checked (RabbitMQ 3.10's words), which one an
object gets, and how a definition merges with a queue's own arguments."""

from __future__ import annotations

from typing import Any

import pytest

from kanin.core.policies import Policy, PolicyError, choose, read_policy
from kanin.core.policy_args import effective_arguments, queue_args_under
from kanin.core.queue_args import MAX_TTL_MS, parse_queue_args


def policy(name: str = "p", pattern: str = ".*", priority: float = 0, **body: Any) -> Policy:
    definition = body.pop("definition", {"max-length": 1})
    return read_policy(
        "/", name, {"pattern": pattern, "definition": definition, "priority": priority, **body}
    )


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(PolicyError) as caught:
        read_policy("/", "p", body)
    return caught.value.reason


# -- checking ------------------------------------------------------------------------------


def test_a_policy_reads_back_in_rabbitmqs_shape() -> None:
    read = read_policy(
        "v", "ttl", {"pattern": "^q", "definition": {"message-ttl": 5}, "apply-to": "queues"}
    )
    assert read.shape() == {
        "vhost": "v",
        "name": "ttl",
        "pattern": "^q",
        "apply-to": "queues",
        "definition": {"message-ttl": 5},
        "priority": 0,
    }


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({"message-ttl": "abc"}, '<<"abc">> is not a valid message TTL'),
        ({"message-ttl": -1}, "-1 is not a valid message TTL"),
        ({"message-ttl": True}, "true is not a valid message TTL"),
        ({"message-ttl": None}, "null is not a valid message TTL"),
        ({"max-length": 1.5}, "1.5 is not a valid maximum length"),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"overflow": "x"}, '<<"x">> is not a valid overflow value'),
        ({"queue-mode": "x"}, '<<"x">> is not a valid queue-mode value'),
        ({"dead-letter-exchange": 1}, "1 is not a valid dead letter exchange name"),
        ({"delivery-limit": -1}, "-1 is not a valid delivery limit"),
        ({"ha-mode": "exactly"}, 'ha-mode="exactly" takes an integer, none given'),
        ({"max-age": "soon"}, '<<"soon">> is not a valid max age'),
        ({}, "no policy provided"),
        ({"nonsense": 1}, '[{<<"nonsense">>,1}] are not recognised policy settings'),
        # Known keys are checked before the unknown ones are named.
        ({"nonsense": 1, "max-length": -1}, "-1 is not a valid maximum length"),
    ],
)
def test_definition_values_are_refused_in_rabbitmqs_words(
    definition: dict[str, Any], reason: str
) -> None:
    body = {"pattern": "q", "definition": definition}
    assert refusal(body) == f"Validation failed\n\n{reason}\n"


def test_the_policy_itself_is_checked_before_its_definition() -> None:
    assert refusal({"definition": {}}) == "[{key_missing,pattern}]"
    assert refusal({"pattern": "q"}) == "[{key_missing,definition}]"
    bad = {"definition": {"nonsense": 1}}
    assert "priority should be a number" in refusal({"pattern": "q", "priority": "5", **bad})
    assert "pattern should be regular expression but is invalid" in refusal({"pattern": "(", **bad})
    assert refusal({"pattern": "q", "apply-to": "quorum_queues", **bad}) == (
        "Validation failed\n\napply-to 'quorum_queues' unrecognised; should be 'queues', "
        "'exchanges' or 'all'\n"
    )


def test_what_rabbitmq_takes_is_taken() -> None:
    taken = {
        "message-ttl": MAX_TTL_MS + 1,
        "ha-mode": "exactly",
        "ha-params": 2,
        "queue-version": 2,
        "dead-letter-routing-key": "k",
        "max-age": "7D",
    }
    assert (
        read_policy("/", "p", {"pattern": "", "definition": taken, "priority": 1.5}).priority == 1.5
    )


# -- choosing ------------------------------------------------------------------------------


def test_the_highest_priority_wins_and_a_tie_goes_to_the_first_name() -> None:
    low, high = policy("low", priority=1), policy("high", priority=2)
    assert choose([low, high], "queue", "q") is high
    b, a = policy("b", priority=5), policy("a", priority=5)
    assert choose([b, a], "queue", "q") is a


def test_patterns_are_searched_for_and_apply_to_filters_the_kind() -> None:
    inside = policy(pattern="rd")
    assert choose([inside], "queue", "orders") is inside  # not anchored, as in RabbitMQ
    anchored = policy(pattern="^rd")
    assert choose([anchored], "queue", "orders") is None
    queues_only = policy(pattern="o", **{"apply-to": "queues"})
    assert choose([queues_only], "exchange", "orders") is None
    assert choose([queues_only], "queue", "orders") is queues_only
    exchanges_only = policy(pattern="o", **{"apply-to": "exchanges"})
    assert choose([exchanges_only], "queue", "orders") is None


# -- merging -------------------------------------------------------------------------------


def test_the_lower_numeric_limit_wins_either_way() -> None:
    merged = effective_arguments(
        "classic",
        {"x-message-ttl": 5000, "x-max-length": 2},
        {"message-ttl": 1000, "max-length": 10, "expires": 60000},
    )
    assert merged == {"x-message-ttl": 1000, "x-max-length": 2, "x-expires": 60000}


def test_a_classic_queues_own_argument_wins_for_the_rest() -> None:
    own = {"x-dead-letter-exchange": "mine", "x-overflow": "reject-publish"}
    merged = effective_arguments(
        "classic", own, {"dead-letter-exchange": "theirs", "overflow": "drop-head"}
    )
    assert merged == own


def test_a_quorum_queue_takes_the_policys_overflow_and_the_lower_delivery_limit() -> None:
    merged = effective_arguments(
        "quorum",
        {"x-queue-type": "quorum", "x-overflow": "drop-head", "x-delivery-limit": 5},
        {"overflow": "reject-publish", "delivery-limit": 1, "queue-mode": "lazy"},
    )
    # queue-mode means nothing to a quorum queue and is left out
    assert merged == {
        "x-queue-type": "quorum",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 1,
    }


def test_a_stream_takes_the_policys_retention_and_nothing_else() -> None:
    merged = effective_arguments(
        "stream",
        {"x-queue-type": "stream", "x-max-length-bytes": 100},
        {"max-length-bytes": 500, "max-age": "1h", "message-ttl": 5},
    )
    assert merged == {"x-queue-type": "stream", "x-max-length-bytes": 500, "x-max-age": "1h"}


def test_delivery_limit_is_for_quorum_queues_as_in_rabbitmq() -> None:
    assert effective_arguments("classic", {}, {"delivery-limit": 3}) == {}


def test_a_routing_key_without_an_exchange_is_dropped_and_huge_ttls_are_capped() -> None:
    merged = effective_arguments(
        "classic", {}, {"dead-letter-routing-key": "k", "message-ttl": MAX_TTL_MS * 2}
    )
    assert merged == {"x-message-ttl": MAX_TTL_MS}
    args = parse_queue_args(merged, "q", "/")
    assert args.dead_letter_routing_key is None and args.message_ttl_ms == MAX_TTL_MS


def test_a_definition_that_clashes_with_the_queues_arguments_leaves_them_alone() -> None:
    own_arguments = {"x-delayed-retry-min": 5000}
    own = parse_queue_args(own_arguments, "q", "/")
    clash = policy(definition={"delayed-retry-max": 10, "max-length": 3})
    assert queue_args_under(clash, "q", "/", own_arguments, own) is own
    fine = policy(definition={"max-length": 3})
    assert queue_args_under(fine, "q", "/", own_arguments, own).max_length == 3
