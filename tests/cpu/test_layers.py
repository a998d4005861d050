"""The house's shape, checked on the source: layers that import only downwards, no import cycle,
small modules and functions."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "asynccopy"

# Top to bottom; a module may import its own layer's modules (without a cycle) and any layer below.
LAYERS = [
    ("entry", ["__init__", "__main__", "cli"]),
    ("bench", ["bench"]),
    ("operations", ["stream", "mechanism", "tma", "tensormap", "swizzle", "stas", "cluster", "trace", "matmul",
                    "gemm_launch", "gemm_kernels", "gemm_schedule", "tuning", "sdpa", "attention_kernels", "attention_schedule",
                    "attention_launch", "attention_trace", "sanitize"]),
    ("model", ["model"]),
    ("runtime", ["build", "toolchain", "arrays", "matrix", "memo", "buffers", "workspace", "plotting"]),
    ("device", ["device", "dtypes"]),
    ("errors", ["errors"]),
]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        yield ".".join(("asynccopy",) + rel.parts).removesuffix(".__init__"), path


def _layer(module: str) -> int:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for i, (_, heads) in enumerate(LAYERS):
        if head in heads:
            return i
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


def _imports(module: str, path: pathlib.Path) -> set[str]:
    """asynccopy modules imported by a module (absolute names), wherever in the file the import is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (base + ("." + node.module if node.module else "")) if node.level else (node.module or "")
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if (PACKAGE.parent / (full.replace(".", "/") + ".py")).exists()
                        or (PACKAGE.parent / full.replace(".", "/")).is_dir() else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "asynccopy" or m.startswith("asynccopy.")}


GRAPH = {module: _imports(module, path) for module, path in _modules()}


def test_every_module_has_a_layer():
    for module in GRAPH:
        _layer(module)


def test_imports_point_down_or_sideways():
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
              for m, deps in GRAPH.items() for d in deps if d in GRAPH and _layer(d) < _layer(m)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle():
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(GRAPH.get(m, ())):
            if d != m and d in GRAPH and not (d == "asynccopy" or m.startswith(d + ".") and d.count(".") < 2):
                visit(d)
        stack.pop()

    for m in GRAPH:
        visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("module, path", list(_modules()), ids=[m for m, _ in _modules()])
def test_small_modules_and_functions(module, path):
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{module}: {len(lines)} lines (split it: at most {MAX_MODULE_LINES})"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{module}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"
