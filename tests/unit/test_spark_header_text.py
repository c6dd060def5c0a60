"""Header values as the text of the source's ``headers`` column."""

import pytest

from spark.amqp.messages import header_text


@pytest.mark.parametrize("value, text", [
    (42, "42"), (-7, "-7"), (2 ** 63 - 1, "9223372036854775807"),  # x-stream-offset
    (True, "true"), (False, "false"), ("acme", "acme"), (b"\xffA", "\\xffA"),
    (None, None), ({"n": 1}, '{"n":1}'),
])
def test_header_values_become_text(value, text):
    assert header_text(value) == text
