"""ruff and mypy are part of the test command: a newcomer's green run means clean code."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_is_clean() -> None:
    result = run_tool("ruff", "check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_kept() -> None:
    result = run_tool("ruff", "format", "--check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run_tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


# References to documents that are not in the repository: a design spec's sections, the
# "seed" papers and experiments it started from, tracker issue numbers. A reader has none
# of them, so code and docs state the behaviour, or link RabbitMQ's public documentation.
# (Written with character classes, and the examples below with underscores, so that a
# plain grep of the repository for such citations finds nothing, this file included.)
OUTSIDE_REFERENCE = re.compile(r"\bS[P]EC\b|\b(?i:seed [0]\d\d|issue [0-9])")
TEXT_SUFFIXES = {".py", ".md", ".json", ".txt", ".toml", ".cfg", ".sh"}


def text_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    for top in ("src", "tests", "bench", "docs"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def test_nothing_cites_documents_outside_the_repository() -> None:
    this_file = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in text_files()
        if path.resolve() != this_file
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_outside_reference_pattern_catches_what_it_is_for() -> None:
    written = ("see SP_EC §3", "seed _003's experiment", "Seed _001 reports", "(issue _5)")
    for cited in (text.replace("_", "") for text in written):
        assert OUTSIDE_REFERENCE.search(cited), cited
    for plain in ("as the spec asks", "qos_semantics_matches_spec", "random seed 7", "no issue"):
        assert not OUTSIDE_REFERENCE.search(plain), plain


# -- the shape of the code ------------------------------------------------------------------

PACKAGE = ROOT / "src" / "kanin"
# Every package: the broker's layers, and the tools and libraries beside them.
LAYERS = (
    *("core", "amqp", "server", "store", "mgmt", "prometheus"),
    *("spark", "cli", "client", "perf", "testing"),
)
MODULE_LINES_MAX = 500
EDGE_LINES_MAX = 250  # server/: the asyncio edge stays thin


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The kanin modules `path` imports when it runs: at module level or inside functions,
    but not under `if TYPE_CHECKING:`."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    nodes: list[ast.AST] = [ast.parse(path.read_text())]
    while nodes:
        node = nodes.pop()
        for child in ast.iter_child_nodes(node):
            if _is_type_checking_block(child):
                assert isinstance(child, ast.If)
                nodes.extend(child.orelse)
            elif isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in known else base)
            else:
                nodes.append(child)
    return {module for module in found if module in known and module != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def layer_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for layer in LAYERS
        for path in sorted((PACKAGE / layer).rglob("*.py"))
    }


def test_no_import_cycles_in_the_broker_layers() -> None:
    modules = layer_modules()
    graph = {name: runtime_imports(path, set(modules)) for name, path in modules.items()}
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_module_is_too_long_and_the_asyncio_edge_is_thin() -> None:
    too_long = []
    for name, path in layer_modules().items():
        lines = len(path.read_text().splitlines())
        limit = EDGE_LINES_MAX if name.startswith("kanin.server.") else MODULE_LINES_MAX
        if lines > limit:
            too_long.append(f"{name}: {lines} lines (at most {limit})")
    assert too_long == []


def compiled_modules() -> list[Path]:
    """setup.py's COMPILED list: the modules mypyc compiles in the default build."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "COMPILED":
            return [ROOT / name for name in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no COMPILED list")


def compiled_rule_breaches(path: Path) -> Iterator[str]:
    """What behaves differently once compiled with mypyc (docs/mypyc.md says why each):
    a class deriving from ABC (the types share abc.ABC's isinstance cache) and
    super().__init__(*args, **kwargs) (the tuple and dict arrive as two arguments)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            if any(ast.unparse(base) in ("ABC", "abc.ABC") for base in node.bases):
                yield f"{path.relative_to(ROOT)}:{node.lineno}: class {node.name}(ABC)"
        elif isinstance(node, ast.Call) and _forwards_everything_to_super_init(node):
            yield f"{path.relative_to(ROOT)}:{node.lineno}: super().__init__(*, **)"


def _forwards_everything_to_super_init(call: ast.Call) -> bool:
    return ast.unparse(call.func) == "super().__init__" and (
        any(isinstance(arg, ast.Starred) for arg in call.args)
        or any(keyword.arg is None for keyword in call.keywords)
    )


def test_compiled_modules_keep_to_what_mypyc_compiles_faithfully() -> None:
    modules = compiled_modules()
    assert len(modules) >= 29 and all(path.exists() for path in modules)
    assert [breach for path in modules for breach in compiled_rule_breaches(path)] == []


def test_the_compiled_rules_catch_what_they_are_for(tmp_path: Path) -> None:
    sample = ROOT / "build" / "rule_sample.py"
    sample.parent.mkdir(exist_ok=True)
    sample.write_text(
        "class Q(ABC):\n    def __init__(self, *a, **k):\n        super().__init__(*a, **k)\n"
    )
    try:
        assert len(list(compiled_rule_breaches(sample))) == 2
    finally:
        sample.unlink()


BUILTIN_CONTAINERS = {"set", "dict", "list", "frozenset", "tuple", "bytearray"}


def test_no_class_overrides_a_builtin_container() -> None:
    """Compiled code holding such an object typed as the builtin calls the builtin's C
    methods directly, past the override (a connection set's counting was lost so)."""
    found = []
    for name, path in layer_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).split("[")[0] for base in node.bases}
                if bases & BUILTIN_CONTAINERS:
                    found.append(f"{name}: class {node.name}")
    assert found == []
