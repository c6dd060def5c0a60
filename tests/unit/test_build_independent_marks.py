"""The `build_independent` mark leaves a test module out of the compiled build's run
(scripts/test.sh): it holds only for modules that import no module the compiled build
compiles. Each marked module is imported alone here and what it pulled in is checked."""

import subprocess
import sys
from pathlib import Path

import pytest

from broker.build import COMPILED_PACKAGES

TESTS = Path(__file__).parents[1]
MARKED = sorted(path for path in TESTS.rglob("test_*.py")
                if "pytest.mark.build_independent" in path.read_text())

CHECK = """
import importlib, sys
sys.path[:0] = {paths!r}
importlib.import_module({module!r})
print(sorted(name for name in sys.modules if name.startswith({packages!r})))
"""


def test_some_modules_are_marked():
    assert len(MARKED) >= 4, MARKED


@pytest.mark.parametrize("path", MARKED, ids=lambda path: path.name)
def test_a_marked_module_imports_nothing_the_compiled_build_compiles(path):
    code = CHECK.format(paths=[str(TESTS), str(path.parent)], module=path.stem,
                        packages=tuple(COMPILED_PACKAGES))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=TESTS.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
