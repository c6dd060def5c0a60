"""The rooms stay small: no class of the core (broker/core, amqp_codec) over 450 lines,
and the socket shell (broker/server/transport.py) under 350, as the renovation left them
(docs/architecture.md). A class that grows past it splits by concern, as Queue,
Connection, Channel and VirtualHost did."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_CLASS_LINES = 450
MAX_TRANSPORT_LINES = 350


def class_sizes(folder: str) -> dict[str, int]:
    sizes = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                name = f"{path.relative_to(ROOT)}:{node.name}"
                sizes[name] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_core_class_is_over_450_lines():
    sizes = {**class_sizes("broker/core"), **class_sizes("amqp_codec")}
    assert "broker/core/queue.py:Queue" in sizes
    assert {name: lines for name, lines in sizes.items() if lines > MAX_CLASS_LINES} == {}


def test_the_socket_shell_is_under_350_lines():
    lines = len((ROOT / "broker/server/transport.py").read_text().splitlines())
    assert lines < MAX_TRANSPORT_LINES
