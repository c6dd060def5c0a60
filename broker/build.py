"""Which build of Warren runs: the mypyc-compiled modules or pure Python.

A regular install (`pip install .`) compiles the modules of COMPILED_PACKAGES, except
NOT_COMPILED, with mypyc when it can (setup.py); an editable install and a failed or
refused compile leave pure Python. A compiled module is an extension module (`.so`)
beside its `.py`, and the import system prefers it. Standard library only: setup.py
reads the module list from here before anything is installed.
"""

import importlib.util
import os
import pkgutil
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

COMPILED_PACKAGES = ("amqp_codec", "broker.core")
# Long(int) and EncodedValue(bytes) subclass builtins, which mypyc compiles only with
# mypy_extensions at run time; so does erlang_hash's Atom(str) (mypyc: "inheriting from
# most builtin types is unimplemented").
NOT_COMPILED = frozenset({"amqp_codec.field_table", "broker.core.erlang_hash"})

COMPILED = "compiled (mypyc)"
PURE = "pure Python"
# The variable that makes a process refuse to run on another build than the one named
# ("compiled" or "pure"): the compiled build's test run sets it, so that a silent
# fallback to pure Python cannot pass as compiled.
EXPECT_BUILD_VARIABLE = "WARREN_EXPECT_BUILD"
EXPECTED_KINDS = {"compiled": COMPILED, "pure": PURE}


class BuildMismatch(RuntimeError):
    """The running build is not the one WARREN_EXPECT_BUILD names."""


def compiled_module_files(root: Path) -> list[Path]:
    """The source files setup.py gives mypyc, under the source tree `root`."""
    files = []
    for package in COMPILED_PACKAGES:
        for path in sorted((root / package.replace(".", "/")).glob("*.py")):
            if f"{package}.{path.stem}" not in NOT_COMPILED:
                files.append(path)
    return files


def compiled_module_names() -> list[str]:
    """The modules a compiled build has as extension modules (found on the import
    path, without importing them)."""
    names = []
    for package in COMPILED_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"package {package} not found")
        names.append(package)
        names.extend(f"{package}.{module.name}"
                     for module in pkgutil.iter_modules(spec.submodule_search_locations)
                     if f"{package}.{module.name}" not in NOT_COMPILED)
    return names


def is_extension_module(name: str) -> bool:
    """Whether the module this process has imported, or would import, is compiled."""
    return _origin(name).endswith(tuple(EXTENSION_SUFFIXES))


def build_kind() -> str:
    """COMPILED, PURE, or, when only some of the modules are compiled (stale `.so`
    files, a broken install), a description saying which are not."""
    names = compiled_module_names()
    pure = [name for name in names if not is_extension_module(name)]
    if not pure:
        return COMPILED
    if len(pure) == len(names):
        return PURE
    return f"partly compiled (mypyc): {', '.join(pure)} not compiled"


def check_expected_build() -> str:
    """The build kind; BuildMismatch when WARREN_EXPECT_BUILD names another one (an
    unknown value is a mismatch too)."""
    kind = build_kind()
    expected = os.environ.get(EXPECT_BUILD_VARIABLE)
    if expected and EXPECTED_KINDS.get(expected) != kind:
        raise BuildMismatch(
            f"{EXPECT_BUILD_VARIABLE}={expected} but this is the {kind} build "
            f"(amqp_codec from {Path(_origin('amqp_codec.decoder')).parent})")
    return kind


def _origin(name: str) -> str:
    """The file of the module: the one imported, else the one an import would load."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin:
        return origin
    spec = importlib.util.find_spec(name)
    return (spec.origin if spec is not None else None) or name
