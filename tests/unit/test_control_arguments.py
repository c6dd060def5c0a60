"""The control socket checks the arguments of an admin operation itself, before the
operation runs: a missing, unknown or wrong-typed argument is refused with a message
naming it, the same on the pure-Python and the compiled build (where the operations'
annotations cannot be read at run time), and changes nothing."""

import ast
import inspect
import json
from pathlib import Path

import pytest
import trio

import broker.core
from broker.core.admin import Administration
from broker.core.broker import Broker
from broker.server.control import (ADMIN_ARGUMENT_TYPES, BOOLEAN, INTEGER, OBJECT_OR_NULL,
                                   STRING, STRING_OR_NULL, ControlSocket)

# A value of the right JSON type for each kind of argument; {} for the ones the
# operation checks itself (tags, limits, a policy's definition).
VALID = {STRING: "x", STRING_OR_NULL: None, BOOLEAN: False, INTEGER: 0,
         OBJECT_OR_NULL: None}
WRONG = {STRING: (5, "a string, not an integer"),
         STRING_OR_NULL: (True, "a string or null, not true or false"),
         BOOLEAN: ("yes", "true or false, not a string"),
         INTEGER: (True, "an integer, not true or false"),
         OBJECT_OR_NULL: ([1], "an object or null, not an array")}


@pytest.fixture
def control(tmp_path):
    return ControlSocket(Broker(), committer=None, path=str(tmp_path / "control.sock"))


def answer(control: ControlSocket, request: str) -> dict:
    return trio.run(control._answer, request.encode())


def required_arguments(operation: str) -> dict:
    """Valid values for every argument the operation requires."""
    types = ADMIN_ARGUMENT_TYPES[operation]
    signature = inspect.signature(getattr(Administration, operation))
    return {name: VALID[types[name]] if name in types else {}
            for name, parameter in list(signature.parameters.items())[1:]
            if parameter.default is inspect.Parameter.empty}


def wrong_typed_requests() -> list:
    return [pytest.param(operation, name, kind, id=f"{operation}-{name}")
            for operation, types in ADMIN_ARGUMENT_TYPES.items()
            for name, kind in types.items()]


@pytest.mark.parametrize("operation, name, kind", wrong_typed_requests())
def test_a_wrong_typed_argument_is_refused_naming_it_and_changes_nothing(
        control, operation, name, kind):
    value, expected = WRONG[kind]
    arguments = {**required_arguments(operation), name: value}
    reply = answer(control, json.dumps({"op": operation, "args": arguments}))
    assert reply == {"ok": False,
                     "error": f"bad arguments for {operation}: {name!r} must be {expected}"}
    assert not control.admin.broker.persistence.has_pending()


def test_a_missing_or_unknown_argument_is_refused_naming_it(control):
    assert answer(control, '{"op": "add_vhost", "args": {}}') == {
        "ok": False, "error": "bad arguments for add_vhost: missing a required argument: "
                              "'name'"}
    assert answer(control, '{"op": "add_vhost", "args": {"name": "v", "owner": "me"}}') \
        == {"ok": False, "error": "bad arguments for add_vhost: got an unexpected keyword "
                                  "argument 'owner'"}
    assert "v" not in control.admin.broker.vhosts


def test_only_the_administration_operations_are_served(control):
    public = {name for name in dir(Administration)
              if not name.startswith("_") and inspect.isroutine(getattr(Administration, name))}
    assert set(ADMIN_ARGUMENT_TYPES) == public
    assert answer(control, '{"op": "broker"}') == {
        "ok": False, "error": "unknown operation 'broker'"}


ANNOTATION_TYPES = {"str": STRING, "str | None": STRING_OR_NULL, "bool": BOOLEAN,
                    "int": INTEGER, "dict | None": OBJECT_OR_NULL}


def test_the_argument_types_are_the_annotations_of_admin_py():
    """The table follows broker/core/admin.py's annotations (read from the source, which
    both builds have); an argument annotated `object` or not at all is the operation's
    to check."""
    source = Path(broker.core.__path__[0]) / "admin.py"
    tree = ast.parse(source.read_text())
    [administration] = [node for node in tree.body
                        if isinstance(node, ast.ClassDef) and node.name == "Administration"]
    annotated = {}
    for function in administration.body:
        if isinstance(function, ast.FunctionDef) and not function.name.startswith("_"):
            arguments = function.args.args[1:]
            annotated[function.name] = {
                argument.arg: ANNOTATION_TYPES[ast.unparse(argument.annotation)]
                for argument in arguments
                if argument.annotation is not None
                and ast.unparse(argument.annotation) != "object"}
    assert annotated == ADMIN_ARGUMENT_TYPES
