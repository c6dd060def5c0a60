"""Which build runs (broker/build.py) and the install's fallback to pure Python
(setup.py): docs/install.md."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.build import (COMPILED, EXPECT_BUILD_VARIABLE, PURE, BuildMismatch, build_kind,
                          check_expected_build, compiled_module_files,
                          compiled_module_names)

ROOT = Path(__file__).resolve().parents[2]


def test_the_compiled_modules_are_the_codec_and_the_core_but_two_that_subclass_builtins():
    files = {path.relative_to(ROOT).as_posix() for path in compiled_module_files(ROOT)}
    assert {"amqp_codec/decoder.py", "broker/core/connection.py",
            "broker/core/__init__.py"} <= files
    assert "amqp_codec/field_table.py" not in files
    assert "broker/core/erlang_hash.py" not in files
    assert not any(name.startswith(("broker/server", "storage")) for name in files)


def test_the_running_build_is_checked_on_every_module_setup_compiles():
    checked = set(compiled_module_names())
    for path in compiled_module_files(ROOT):
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        assert module.removesuffix(".__init__") in checked


def test_the_build_is_wholly_compiled_or_wholly_pure():
    assert build_kind() in (COMPILED, PURE)


@pytest.mark.parametrize("expected", ["compiled", "pure"])
def test_a_process_refuses_to_run_on_another_build_than_the_expected_one(
        monkeypatch, expected):
    monkeypatch.setenv(EXPECT_BUILD_VARIABLE, expected)
    if {"compiled": COMPILED, "pure": PURE}[expected] == build_kind():
        assert check_expected_build() == build_kind()
    else:
        with pytest.raises(BuildMismatch, match=f"{EXPECT_BUILD_VARIABLE}={expected}"):
            check_expected_build()


def test_an_unknown_expected_build_is_a_mismatch(monkeypatch):
    monkeypatch.setenv(EXPECT_BUILD_VARIABLE, "fast")
    with pytest.raises(BuildMismatch):
        check_expected_build()


@pytest.mark.parametrize("compile_asked, compiler, says", [
    ("0", None, "WARREN_COMPILE=0: installing the pure-Python build"),
    (None, "no-such-compiler", "no C compiler (no-such-compiler): installing the "
                               "pure-Python build"),
])
def test_a_build_that_cannot_or_must_not_compile_installs_pure_python_and_says_why(
        compile_asked, compiler, says):
    environment = dict(os.environ)
    environment.pop("WARREN_COMPILE", None)
    environment.pop("CC", None)
    if compile_asked is not None:
        environment["WARREN_COMPILE"] = compile_asked
    if compiler is not None:
        environment["CC"] = compiler
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                            cwd=ROOT, env=environment, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"warren: {says}" in result.stderr
