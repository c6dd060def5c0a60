"""The headers exchange's matching rule, `headers_match(binding arguments, message
headers)` (broker/core/exchange.py), as RabbitMQ 3.10 defines it (docs/compatibility.md):

- `x-match` is `all` (the default) or `any`; the binding's other keys are the header
  pairs to match;
- keys starting with `x-` are not matched under `all` and `any`, and are under
  `all-with-x` and `any-with-x`;
- a pair whose value is void (None) asks only that the header is present;
- `all` with no pairs matches every message, `any` with no pairs none.

The integration tests (tests/integration/test_routing.py) route through a headers
exchange on the wire; these check the rule itself, case by case."""

import pytest

from broker.core.exchange import headers_match

PAIRS = {"format": "pdf", "pages": 3}

CASES = [
    # (binding arguments, message headers, expected)
    # -- all, the default ------------------------------------------------------------
    ({**PAIRS}, {"format": "pdf", "pages": 3}, True),
    ({**PAIRS}, {"format": "pdf"}, False),
    ({"x-match": "all", **PAIRS}, {"format": "pdf", "pages": 3, "other": "extra"}, True),
    ({"x-match": "all", **PAIRS}, {"format": "pdf"}, False),
    ({"x-match": "all", **PAIRS}, {"format": "pdf", "pages": 4}, False),
    ({"x-match": "all", **PAIRS}, {}, False),
    ({"x-match": "all"}, {}, True),
    ({"x-match": "all"}, {"anything": 1}, True),
    # -- any --------------------------------------------------------------------------
    ({"x-match": "any", **PAIRS}, {"format": "pdf"}, True),
    ({"x-match": "any", **PAIRS}, {"pages": 3}, True),
    ({"x-match": "any", **PAIRS}, {"format": "txt", "pages": 4}, False),
    ({"x-match": "any", **PAIRS}, {"other": "pdf"}, False),
    ({"x-match": "any", **PAIRS}, {}, False),
    ({"x-match": "any"}, {"anything": 1}, False),
    # -- x- keys: not matched by all and any ------------------------------------------
    ({"x-match": "all", "x-tenant": "a", **PAIRS}, {"format": "pdf", "pages": 3}, True),
    ({"x-match": "any", "x-tenant": "a"}, {"x-tenant": "a"}, False),
    ({"x-match": "any", "x-tenant": "a", "format": "pdf"}, {"x-tenant": "a"}, False),
    # -- all-with-x and any-with-x: x- keys are pairs like the others -----------------
    ({"x-match": "all-with-x", "x-tenant": "a", "format": "pdf"},
     {"x-tenant": "a", "format": "pdf"}, True),
    ({"x-match": "all-with-x", "x-tenant": "a", "format": "pdf"}, {"format": "pdf"}, False),
    ({"x-match": "all-with-x", "x-tenant": "a", "format": "pdf"},
     {"x-tenant": "b", "format": "pdf"}, False),
    ({"x-match": "any-with-x", "x-tenant": "a", "format": "pdf"}, {"x-tenant": "a"}, True),
    ({"x-match": "any-with-x", "x-tenant": "a", "format": "pdf"}, {"x-tenant": "b"}, False),
    ({"x-match": "any-with-x", "x-tenant": "a"}, {}, False),
    # -- void values: presence only ---------------------------------------------------
    ({"x-match": "all", "format": None}, {"format": "anything"}, True),
    ({"x-match": "all", "format": None}, {"format": None}, True),
    ({"x-match": "all", "format": None}, {}, False),
    ({"x-match": "all", "format": None, "pages": 3}, {"format": 1, "pages": 3}, True),
    ({"x-match": "all", "format": None, "pages": 3}, {"format": 1, "pages": 2}, False),
    ({"x-match": "any", "format": None, "pages": 3}, {"format": 0}, True),
    ({"x-match": "any", "format": None, "pages": 3}, {"pages": 2}, False),
    # a void header does not equal a value
    ({"x-match": "all", "format": "pdf"}, {"format": None}, False),
    ({"x-match": "any", "format": "pdf"}, {"format": None}, False),
    # -- x-match as it may arrive on the wire: a byte string --------------------------
    ({"x-match": b"any", **PAIRS}, {"pages": 3}, True),
    ({"x-match": b"all-with-x", "x-tenant": "a"}, {}, False),
]


@pytest.mark.parametrize("arguments, headers, expected", CASES)
def test_headers_match(arguments, headers, expected):
    assert headers_match(arguments, headers) is expected
