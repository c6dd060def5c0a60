"""Unit-test fixtures shared by the codec tests."""

import pytest
from pamqp import base, commands


@pytest.fixture(scope="session", autouse=True)
def pamqp_accepts_any_name():
    """pamqp's validate() refuses queue and exchange names outside an ASCII pattern (and
    exchange names over 127 characters); RabbitMQ, and Warren, take any UTF-8 up to 255
    bytes. The codec tests use pamqp as the reference encoding for such names, so its
    validation is switched off for them (its encoding does not depend on it)."""
    originals = {cls: cls.__dict__["validate"] for cls in commands.INDEX_MAPPING.values()
                 if "validate" in cls.__dict__}
    for cls in originals:
        cls.validate = base.Frame.validate
    yield
    for cls, validate in originals.items():
        cls.validate = validate
