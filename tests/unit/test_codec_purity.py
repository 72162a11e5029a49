"""The codec package is pure: no I/O, clocks or threads (kanin/amqp/__init__.py's rule).

Checked on the source: every import statement of every module in src/kanin/amqp,
at any nesting level (function-local imports included), and dynamic imports by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kanin.amqp

FORBIDDEN = {"asyncio", "socket", "os", "time", "threading"}
PACKAGE_DIR = Path(kanin.amqp.__file__).parent
MODULES = sorted(PACKAGE_DIR.glob("*.py"))


def imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            # __import__("os") / importlib.import_module("os")
            func = node.func
            called = (
                func.id
                if isinstance(func, ast.Name)
                else (func.attr if isinstance(func, ast.Attribute) else "")
            )
            if called in ("__import__", "import_module") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def forbidden_in(names: set[str]) -> set[str]:
    return {name for name in names if name.split(".")[0] in FORBIDDEN}


def test_the_package_has_the_expected_modules() -> None:
    found = {path.name for path in MODULES}
    assert {"__init__.py", "frames.py", "methods.py", "assembler.py", "errors.py"} <= found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_imports_no_io_clock_or_threads(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    assert forbidden_in(imported_modules(tree)) == set()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_does_not_reach_forbidden_modules_through_attributes(path: Path) -> None:
    """e.g. `import pamqp; pamqp.common.os.urandom` or `sys.modules['socket']`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    subscripts = {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    }
    assert (attributes | subscripts) & FORBIDDEN == set()


def test_checker_detects_forbidden_imports() -> None:
    """The AST walk itself must catch every form of import it claims to."""
    source = (
        "import os\n"
        "import os.path as p\n"
        "from time import monotonic\n"
        "def f():\n"
        "    import socket\n"
        "    from asyncio import sleep\n"
        "    return __import__('threading')\n"
        "import json\n"
        "from kanin.amqp import constants\n"
    )
    found = forbidden_in(imported_modules(ast.parse(source)))
    assert {name.split(".")[0] for name in found} == FORBIDDEN
    assert not any(name.startswith(("json", "kanin")) for name in found)
