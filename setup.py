"""Build hook: a regular install (`pip install .`, a wheel, `setup.py build_ext`)
compiles amqp_codec and broker/core with mypyc (the module list is in broker/build.py);
everything else about the package is in pyproject.toml. The whole suite runs on both
builds in CI (docs/install.md, docs/testing.md).

Pure Python, with one line saying why, when:
- WARREN_COMPILE is 0,
- the install is editable (`pip install -e .`: edits must need no rebuild; scripts/venv.sh),
- mypyc, a C compiler or the Python headers are missing, or the compile fails.
The .py files are installed either way; a compiled module is a `.so` beside its `.py`.
`warren --version` says which build runs (docs/install.md).
"""

import os
import runpy
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD = runpy.run_path(str(ROOT / "broker" / "build.py"))
# The setup.py commands that build extension modules; the others (egg_info, dist_info,
# sdist, editable_wheel, develop) do not need mypyc's C code.
BUILDING_COMMANDS = {"build", "build_ext", "bdist_wheel", "install"}
EDITABLE_COMMANDS = {"editable_wheel", "develop"}
COMPILE_VARIABLE = "WARREN_COMPILE"


def say(line: str) -> None:
    print(f"warren: {line}", file=sys.stderr, flush=True)


def reason_to_stay_pure(commands: set[str]) -> str | None:
    """Why this build is pure Python (None: compile). An empty reason: no line."""
    if commands & EDITABLE_COMMANDS:
        return "an editable install is not compiled: installing the pure-Python build"
    if not commands & BUILDING_COMMANDS:
        return ""
    if os.environ.get(COMPILE_VARIABLE) == "0":
        return f"{COMPILE_VARIABLE}=0: installing the pure-Python build"
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return (f"no C compiler ({compiler}): installing the pure-Python build "
                "(Debian: apt-get install gcc python3-dev)")
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.exists():
        return (f"no Python headers ({headers}): installing the pure-Python build "
                "(Debian: apt-get install python3-dev)")
    return None


def mypyc_extensions() -> list:
    commands = {argument for argument in sys.argv[1:] if not argument.startswith("-")}
    reason = reason_to_stay_pure(commands)
    if reason is not None:
        if reason:
            say(reason)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        say(f"mypyc is not installed ({error}): installing the pure-Python build")
        return []
    files = [str(path.relative_to(ROOT)) for path in BUILD["compiled_module_files"](ROOT)]
    # mypy's [[tool.mypy.overrides]] for broker.server do not apply to these files:
    # without the flag mypyc stops on the unused-section note. One C file per module
    # (multi_file) instead of one for all: the whole compile takes two thirds of the CPU
    # (104 s against 150 s here), and the hot path runs the same instructions
    # (bench/callgrind_per_message.sh: 27,473 against 27,474 a message).
    try:
        return mypycify(["--no-warn-unused-configs", *files], multi_file=True,
                        opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"))
    except (Exception, SystemExit) as error:   # mypyc exits on a type error
        say(f"mypyc could not translate the modules ({error!r}): installing the "
            "pure-Python build")
        return []


class BuildExtOrFallBack(build_ext):
    """build_ext with the extensions built in parallel, that leaves the pure-Python
    build (and no partial set of compiled modules) when the C compile fails."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:   # CompileError, LinkError, a missing tool
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            self.extensions = []
            say(f"the C compile failed ({error}): installing the pure-Python build")


setup(ext_modules=mypyc_extensions(), cmdclass={"build_ext": BuildExtOrFallBack})
