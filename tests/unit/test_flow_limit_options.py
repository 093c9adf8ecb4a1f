"""An operation's limits are checked when its module is loaded: a bad one is a
``RegistrationError`` naming the operation and the option, as other options are."""

import pytest

from workflows_app.errors import RegistrationError
from workflows_app.flow.limits import Rate, check, key_of, parse_rate


def charge(ctx, account, amount=0):
    pass


@pytest.mark.parametrize("text, rate", [("10/s", Rate(10, 1)), ("600/m", Rate(600, 60)), (" 1000 / h ", Rate(1000, 3600))])
def test_a_rate_is_a_count_per_second_minute_or_hour(text, rate):
    assert parse_rate(text) == rate and str(rate) == text.replace(" ", "")


@pytest.mark.parametrize("options, words", [
    ({"rate_limit": "10/d"}, "rate_limit is malformed"),
    ({"rate_limit": "0/s"}, "rate_limit is malformed"),
    ({"rate_limit": 10}, "rate_limit is malformed"),
    ({"concurrency": 0}, "concurrency must be a whole number of 1 or more"),
    ({"concurrency": True}, "concurrency must be a whole number"),
    ({"concurrency": 2.5}, "concurrency must be a whole number"),
    ({"concurrency": 2, "concurrency_key": "acount"}, "concurrency_key must be 'agent' or one of the operation's "
                                                      "parameters (account, amount), not 'acount'"),
    ({"concurrency_key": "account"}, "concurrency_key='account' needs concurrency"),
    ({"rate_key": "agent"}, "rate_key='agent' needs rate_limit"),
    ({"rate_limit": "5/s", "rate_key": "ctx"}, "rate_key must be 'agent' or one of"),
])
def test_a_bad_limit_is_refused_naming_the_operation_and_the_option(options, words):
    with pytest.raises(RegistrationError) as refused:
        check("charge", charge, **options)
    assert str(refused.value).startswith("operation 'charge': ") and words in str(refused.value)


def test_the_decorator_refuses_at_registration():
    from workflows_app.sdk import operation

    with pytest.raises(RegistrationError, match="operation 'never_registered': concurrency"):
        operation(name="never_registered", concurrency=-1)(charge)


def test_a_key_is_the_operation_the_agent_or_a_parameter_as_the_call_binds_it():
    assert key_of("rate", "charge", charge, None, ["acme"], {}, "h1") == "rate:charge"
    assert key_of("rate", "charge", charge, "agent", ["acme"], {}, "h1") == "rate:charge@h1"
    positional = key_of("concurrency", "charge", charge, "account", ["acme"], {}, "h1")
    assert positional == key_of("concurrency", "charge", charge, "account", [], {"account": "acme"}, "h2")
    assert positional == 'concurrency:charge="acme"'
    assert key_of("concurrency", "charge", charge, "amount", ["acme"], {}, "h1") == "concurrency:charge=0", "its default"
    long = key_of("concurrency", "charge", charge, "account", ["x" * 1000], {}, "h1")
    assert len(long) == 255 and long != key_of("concurrency", "charge", charge, "account", ["x" * 999 + "y"], {}, "h1")
