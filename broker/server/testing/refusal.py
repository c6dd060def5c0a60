"""The refusal of a test operation (a module of its own, so that the operation modules
and hooks.py, which imports them, can all raise it)."""


class TestHookError(Exception):
    """The operation is refused; the text says why and what to do."""
