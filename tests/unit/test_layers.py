"""The layer rules of docs/architecture.md, checked on the source: every import in
amqp_codec/, broker/core/ and storage/ (at any depth: inside functions, `if
TYPE_CHECKING:` blocks, try/except; relative imports resolved against the file's
package; `importlib.import_module("...")` and `__import__("...")` with a literal name).

- broker/core imports neither trio, nor storage, nor broker.server;
- amqp_codec imports only pamqp, itself and the standard library;
- storage imports nothing of broker;
- broker/testing imports of the broker only its settings, the node and the control
  socket's constants (it talks to the broker over its sockets).

The checker is also run on small synthetic trees that break each rule, so this test is
known to fail when a rule is broken.

Inside broker/core, the largest cycle of imports (a strongly connected component of the
import graph, counting the imports made only for type checking) is held under a ceiling:
the layers below a channel (queues, exchanges) declare what they need of the objects
above them as Protocols instead of importing them (queue_base.py).
"""

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LayerRule:
    """What the modules under `directory` may not import. `forbidden` names packages
    (a package covers its submodules); `only`, when set, is the complete list of
    non-standard-library packages allowed."""

    directory: str
    reason: str
    forbidden: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None

    def refuses(self, module: str) -> bool:
        if any(_within(module, package) for package in self.forbidden):
            return True
        if self.only is None:
            return False
        top = module.split(".")[0]
        return top not in sys.stdlib_module_names and not any(
            _within(module, package) for package in self.only)


RULES = (
    LayerRule("broker/core", "broker/core never imports trio, storage or broker.server",
              forbidden=("trio", "storage", "broker.server")),
    LayerRule("amqp_codec", "amqp_codec imports only pamqp and the standard library",
              only=("pamqp", "amqp_codec")),
    LayerRule("storage", "storage never imports broker", forbidden=("broker",)),
    LayerRule("broker/testing", "broker/testing reaches a broker through its sockets: of "
              "the broker it imports only the settings, the node (the thread mode) and the "
              "control socket's constants",
              only=("broker.testing", "broker.config", "broker.server.node",
                    "broker.server.control", "pika", "pytest")),
)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    module: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module} ({self.reason})"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool):
    """(line, dotted module name) for every import in `tree`. A `from X import y`
    yields X and X.y (y may be a submodule); a relative import is resolved against the
    package of `module`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            yield node.lineno, base
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            yield node.lineno, node.args[0].value


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts) - 1:
        return f"<relative import beyond the top-level package: level {node.level}>"
    base = ".".join(parts[:len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _is_dynamic_import(node: ast.Call) -> bool:
    function = node.func
    named = ((isinstance(function, ast.Name) and function.id == "__import__")
             or (isinstance(function, ast.Attribute) and function.attr == "import_module"))
    return (named and bool(node.args) and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str))


def check_layers(root: Path) -> list[Violation]:
    """Every import under `root` that breaks a rule of RULES."""
    violations = []
    for rule in RULES:
        for path in sorted((root / rule.directory).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            name = module_name(root, path)
            reported = set()     # one report per line: `from storage import a, b`
            for line, imported in imported_modules(tree, name, path.name == "__init__.py"):
                if line not in reported and (imported.startswith("<")
                                             or rule.refuses(imported)):
                    reported.add(line)
                    violations.append(Violation(str(path.relative_to(root)), line,
                                                imported, rule.reason))
    return violations


def test_the_code_keeps_the_layer_rules():
    violations = check_layers(ROOT)
    if violations:
        pytest.fail("layer rules broken (docs/architecture.md, Layers: imports flow "
                    "downward only; what the core needs from outside is a port it "
                    "declares, which broker/server implements):\n"
                    + "\n".join(map(str, violations)))


def test_every_layer_directory_is_checked():
    """A moved or renamed layer would make the check above pass vacuously."""
    for rule in RULES:
        assert len(list((ROOT / rule.directory).rglob("*.py"))) > 3, rule.directory


# -- the checker fails when a rule is broken -----------------------------------------

BREAKING_SOURCES = {
    "broker/core/bad_trio.py": ("import logging\n"
                                "def later():\n"
                                "    import trio.lowlevel\n", {3: "trio.lowlevel"}),
    "broker/core/bad_storage.py": ("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n"
                                   "    from storage.metadata import MetadataStore\n",
                                   {3: "storage.metadata"}),
    "broker/core/bad_server.py": ("from ..server import listener\n"
                                  "from broker import server\n",
                                  {1: "broker.server", 2: "broker.server"}),
    "broker/core/bad_dynamic.py": ("import importlib\n"
                                   "importlib.import_module('trio')\n"
                                   "__import__('storage.queue_file')\n",
                                   {2: "trio", 3: "storage.queue_file"}),
    "amqp_codec/bad_broker.py": ("try:\n"
                                 "    from broker.core.message import Message\n"
                                 "except ImportError:\n"
                                 "    pass\n",
                                 {2: "broker.core.message"}),
    "amqp_codec/bad_others.py": ("import storage\n"
                                 "import trio, struct\n"
                                 "from sqlalchemy import select\n",
                                 {1: "storage", 2: "trio", 3: "sqlalchemy"}),
    "amqp_codec/sub/__init__.py": ("from ...broker import core\n", {1: "<relative"}),
    "storage/bad_broker.py": ("class Store:\n"
                              "    def load(self):\n"
                              "        from broker.core import persistence\n",
                              {3: "broker.core"}),
}

ALLOWED_SOURCES = {
    "broker/core/good.py": ("import logging\n"
                            "from broker import __version__\n"
                            "from . import message\n"
                            "from .message import Message\n"
                            "from amqp_codec.reply_codes import ReplyCode\n"),
    "amqp_codec/good.py": ("from __future__ import annotations\n"
                           "import struct, datetime\n"
                           "from pamqp import commands\n"
                           "from .errors import ProtocolError\n"
                           "from amqp_codec.constants import FRAME_END\n"),
    "storage/good.py": ("import os\n"
                        "from sqlalchemy import select\n"
                        "from storage import passwords\n"
                        "from .record import encode_record\n"
                        "text = 'import broker'\n"),
}


def _write_tree(root: Path, sources: dict[str, str]) -> None:
    for relative, text in sources.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("relative", sorted(BREAKING_SOURCES))
def test_the_checker_reports_each_broken_rule_with_file_and_line(tmp_path, relative):
    text, expected = BREAKING_SOURCES[relative]
    _write_tree(tmp_path, {relative: text})
    found = {(violation.line, violation.module) for violation in check_layers(tmp_path)}
    for line, module in expected.items():
        assert any(seen_line == line and seen.startswith(module)
                   for seen_line, seen in found), (line, module, found)
    assert all(str(violation).startswith(f"{relative}:")
               for violation in check_layers(tmp_path))


def test_the_checker_accepts_imports_the_rules_allow(tmp_path):
    _write_tree(tmp_path, ALLOWED_SOURCES)
    assert check_layers(tmp_path) == []


# -- import cycles inside broker/core ------------------------------------------------

# The modules of broker/core in its largest import cycle, at most. The queues left it
# (queue_base.py declares what they need of a channel, connection and vhost); the channel
# and the connection, and the collaborators that take them as a back pointer (confirms,
# transactions, consuming, publish checks, direct reply-to, delayed holds, the channel
# table, the read pauses, the handshake, held output) still import one another for type
# checking. Lower this when that component shrinks, never raise it.
CORE_CYCLE_CEILING = 18


def core_import_graph(root: Path) -> dict[str, set[str]]:
    """For each module of broker/core (by its name in the package), the modules of
    broker/core it imports, at run time or for type checking."""
    package = "broker.core"
    paths = {path.stem: path for path in sorted((root / "broker/core").glob("*.py"))
             if path.stem != "__init__"}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for _, imported in imported_modules(tree, f"{package}.{name}", False):
            if imported.startswith(package + "."):
                target = imported[len(package) + 1:].split(".")[0]
                if target in graph and target != name:
                    graph[name].add(target)
    return graph


def largest_cycle(graph: dict[str, set[str]]) -> list[str]:
    """The largest strongly connected component of `graph` (Tarjan's algorithm), sorted;
    a single module when there is no cycle."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    largest: list[str] = []

    def visit(module: str) -> None:
        nonlocal largest
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], index[imported])
        if lowest[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > len(largest):
                largest = sorted(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return largest


def test_the_core_import_cycle_stays_under_its_ceiling():
    cycle = largest_cycle(core_import_graph(ROOT))
    assert len(cycle) <= CORE_CYCLE_CEILING, (
        f"{len(cycle)} modules of broker/core import one another (counting imports "
        f"under TYPE_CHECKING), over the ceiling of {CORE_CYCLE_CEILING}: "
        f"{', '.join(cycle)}. Declare what a lower module needs of a higher one as a "
        "Protocol where the lower one is (as queue_base.py does) instead of importing it")


def test_the_cycle_finder_counts_imports_made_for_type_checking(tmp_path):
    _write_tree(tmp_path, {
        "broker/core/top.py": "from .middle import Middle\n",
        "broker/core/middle.py": "from . import bottom\n",
        "broker/core/bottom.py": ("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n"
                                  "    from broker.core.top import Top\n"),
        "broker/core/leaf.py": "import broker.core.bottom\n",
    })
    assert largest_cycle(core_import_graph(tmp_path)) == ["bottom", "middle", "top"]
