"""The package's import graph: no module reaches back to one that imports it.

The graph is read from the source with `ast`, every import statement that
runs counted: module level and inside functions (the lazy ones that keep
TensorFlow out of `import keras_xla_guard`). A lazy import hides a cycle
from Python but not from a reader, so it counts here too. Imports under
`if TYPE_CHECKING:` never run; they name a type for annotations only and do
not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import keras_xla_guard

_ROOT = Path(keras_xla_guard.__file__).parent
_PACKAGE = "keras_xla_guard"


def _modules(root: Path = _ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, packages by their `__init__.py`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([_PACKAGE, *parts])] = path
    return found


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The package module an imported dotted name lands in, or None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.AST) -> bool:
    """Whether `node` is `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` outside the bodies of `if TYPE_CHECKING:` blocks."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _imports(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The package modules `module` imports at run time, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name` imports the submodule `pkg.name` when it
            # is one, else an attribute of `pkg`.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            target = _resolve(name, modules) if name.startswith(_PACKAGE) else None
            if target is not None and target != module:
                targets.add(target)
    return targets


def import_graph(root: Path = _ROOT) -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    modules = _modules(root)
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    """No module imports, directly or through others, a module that imports it."""
    graph = import_graph()
    found = cycles(graph)
    detail = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in found
    ]
    assert found == [], "\n".join(detail)


def test_the_graph_reader_sees_lazy_and_relative_imports_but_not_type_only_ones(tmp_path):
    """A cycle closed by an import inside a function or a relative import is found; a type-only one is not."""
    package = tmp_path / _PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .low import x\n")
    (package / "sub" / "low.py").write_text(
        "def f():\n    from keras_xla_guard.top import y\n    return y\nx = 1\n"
    )
    (package / "top.py").write_text("from keras_xla_guard.sub import low\ny = 2\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from keras_xla_guard.top import y\n"
        "else:\n    from keras_xla_guard.sub import low\n"
    )
    graph = import_graph(package)
    assert graph["keras_xla_guard.sub"] == {"keras_xla_guard.sub.low"}
    assert graph["keras_xla_guard.top"] == {"keras_xla_guard.sub.low"}
    assert graph["keras_xla_guard.typed"] == {"keras_xla_guard.sub.low"}
    assert cycles(graph) == [["keras_xla_guard.sub.low", "keras_xla_guard.top"]]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_cycles_are_the_components_of_more_than_one_module(graph, expected):
    """Tarjan's components: chains are free, two- and three-module loops are found."""
    assert cycles(graph) == expected


# The layers of docs/architecture.md, lowest first: a module may import its own
# room or a lower layer, never a higher one, and rooms sharing a layer stay out
# of each other. The first matching prefix decides a module's layer; a room is
# a module's first dotted part. `compare`'s pure part (its report and the
# arithmetic on it) sits in the core, which `output/` renders; its measuring
# modules are adapters.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "_checks", "_version", "_interrupts")),
    ("pure data", ("signatures",)),
    ("pure core", ("trace", "comparison.core", "comparison.report")),
    ("private internals", ("seam",)),
    ("framework runtime", ("backend",)),
    ("engine", ("runtime",)),
    ("renderers and diagnosis", ("output", "diagnose")),
)
_COMPARE_PACKAGE = "comparison"


def layer_of(module: str) -> tuple[int, str]:
    """`(layer index, room)` of a package module; adapters (everything else) are the top layer."""
    name = module.removeprefix(_PACKAGE + ".")
    if name == _COMPARE_PACKAGE:
        # The package's __init__ re-exports the pure part and loads compare() lazily.
        name = _COMPARE_PACKAGE + ".report"
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes):
            return index, name.split(".")[0]
    return len(LAYERS), "adapters"


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Each import that reaches a higher layer, or a sibling room of the same layer."""
    found = []
    for module, targets in sorted(graph.items()):
        (layer, room) = layer_of(module)
        for target in sorted(targets):
            (target_layer, target_room) = layer_of(target)
            sibling = target_layer == layer < len(LAYERS) and target_room != room
            if target_layer > layer or sibling:
                found.append(
                    f"{module} ({LAYERS[layer][0] if layer < len(LAYERS) else 'adapters'}) imports {target}"
                )
    return found


def test_imports_go_one_way_between_the_layers():
    """No room imports a higher layer (docs/architecture.md's drawing), nor a sibling room of its own layer."""
    graph = import_graph()
    assert upward_imports(graph) == []


def test_the_layer_check_finds_an_upward_and_a_sibling_import():
    """trace importing runtime (up) and output importing diagnose (sideways) are both reported."""
    graph = {
        "keras_xla_guard.trace.analysis": {"keras_xla_guard.runtime.engine", "keras_xla_guard.errors"},
        "keras_xla_guard.output.console": {"keras_xla_guard.diagnose.advice", "keras_xla_guard.trace.report"},
        "keras_xla_guard.callback": {"keras_xla_guard.runtime.engine", "keras_xla_guard.loop"},
        "keras_xla_guard.comparison.runner": {"keras_xla_guard.output.compare_summaries"},
    }
    assert upward_imports(graph) == [
        "keras_xla_guard.output.console (renderers and diagnosis) imports keras_xla_guard.diagnose.advice",
        "keras_xla_guard.trace.analysis (pure core) imports keras_xla_guard.runtime.engine",
    ]
    assert layer_of("keras_xla_guard.comparison.runner") == (len(LAYERS), "adapters")
    assert layer_of("keras_xla_guard.comparison") == (2, "comparison")
