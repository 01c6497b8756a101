"""The suite's layers: imports point one way and form no cycle.

Bottom to top: ``oracles`` (what is right), ``fixtures.protocol`` (what a
subject is), ``fixtures.outcomes`` (how a run's problems are classed), ``fixtures.findings`` (how a known finding
is matched and passed over), ``fixtures.inputs``, ``fixtures.models`` (stand-ins for a GPU),
``fixtures.subjects``, ``fixtures.bench`` (what the benchmarks share),
``fixtures.harness``, ``fixtures.plugin``, ``tools``.
A module may import its own layer and those below; imports under ``if
TYPE_CHECKING:`` (annotations only) are not counted.  Above them all,
``tests``: a test module or conftest imports the package (``oracles``,
``fixtures``, ``tools``) and never another module under ``tests/`` (nor any
other module of the checkout's root): what two tests share lives in the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tools.killmatrix import ROOT

LAYERS = (
    "oracles",
    "fixtures",  # the bare package (its __init__ imports nothing)
    "fixtures.protocol",
    "fixtures.outcomes",
    "fixtures.findings",
    "fixtures.inputs",
    "fixtures.models",
    "fixtures.subjects",
    "fixtures.bench",
    "fixtures.harness",
    "fixtures.plugin",
    "tools",
)
SUITE = ("oracles", "fixtures", "tools")


def layer_of(module: str) -> int | None:
    """The rank of the longest layer name that is ``module`` or a package above it."""
    ranks = [rank for rank, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")]
    return max(ranks, key=lambda rank: len(LAYERS[rank]), default=None)


def suite_imports(source: str) -> set[str]:
    """The suite modules ``source`` imports, anywhere but under ``if TYPE_CHECKING:``."""
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # submodules among them
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return {m for m in found if m.split(".")[0] in SUITE}


def module_name(root: Path, path: Path) -> str:
    return str(path.relative_to(root).with_suffix("")).replace("/", ".").removesuffix(".__init__")


def import_graph(root: Path) -> dict[str, set[str]]:
    files = [p for top in SUITE for p in (root / top).rglob("*.py")]
    graph = {module_name(root, p): suite_imports(p.read_text()) for p in files}
    # keep modules only: `from fixtures.models import b` counts as importing fixtures.models.b
    return {
        m: {t for t in imports if t in graph or layer_of(t) is None}
        | {t.rsplit(".", 1)[0] for t in imports if t not in graph and t.rsplit(".", 1)[0] in graph}
        for m, imports in graph.items()
    }


def layering_problems(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, imports in sorted(graph.items()):
        own = layer_of(module)
        if own is None:
            problems.append(f"{module} is in no layer")
            continue
        problems += [
            f"{module} (layer {LAYERS[own]}) imports {target} (layer {LAYERS[layer_of(target)]})"
            for target in sorted(imports)
            if layer_of(target) is not None and layer_of(target) > own
        ]
    state: dict[str, int] = {}

    def walk(module, path):
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if target == module or target not in graph:
                continue
            if state.get(target) == 1:
                problems.append("import cycle: " + " -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                walk(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    return problems


def imports_within_tests(root: Path) -> list[str]:
    """Imports of a module under ``root/tests`` that name a module of the checkout other than the package:
    another module under ``tests/`` (absolute or relative), the root conftest, any other top-level module."""
    local = {p.stem for p in root.glob("*.py")} | {p.parent.name for p in root.glob("*/__init__.py")}
    problems = []
    for path in sorted((root / "tests").rglob("*.py")):
        module = module_name(root, path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:  # within tests/, wherever it points
                dots = "." * node.level
                targets = [dots + node.module] if node.module else [dots + alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            problems += [
                f"{module} imports {target} (a test module imports only oracles, fixtures and tools)"
                for target in targets
                if target.startswith(".") or (target.split(".")[0] in local and target.split(".")[0] not in SUITE)
            ]
    return problems


def test_imports_point_down_the_layers_without_cycles():
    graph = import_graph(ROOT)
    assert len(graph) > 40 and all(layer_of(m) is not None for m in graph), sorted(graph)
    assert layering_problems(graph) == []


def test_tests_import_only_the_package():
    assert len(list((ROOT / "tests").rglob("test_*.py"))) > 20
    assert imports_within_tests(ROOT) == []


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write a tree of source files (path relative to ``root`` -> text) for a selftest."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_check_catches_an_upward_import_and_a_cycle(tmp_path):
    files = {
        "oracles/__init__.py": "",
        "oracles/step.py": "from fixtures.protocol import BuilderConfig\n",
        "fixtures/__init__.py": "",
        "fixtures/protocol.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fixtures.plugin\n",
        "fixtures/models/a.py": "def f():\n    from fixtures.models import b\n",
        "fixtures/models/b.py": "import fixtures.models.a\n",
        "tests/__init__.py": "",
        "tests/a/helpers.py": "import fixtures.models.a\nimport torch\n",
        "tests/a/test_x.py": "from fixtures.models import b\nfrom tests.a.helpers import f\nimport tests.a\n",
        "tests/a/conftest.py": "def pytest_configure(config):\n    from . import helpers\n",
    }
    write_tree(tmp_path, files)
    (tmp_path / "tools").mkdir()
    problems = layering_problems(import_graph(tmp_path))
    assert problems == [
        "oracles.step (layer oracles) imports fixtures.protocol (layer fixtures.protocol)",
        "import cycle: fixtures.models.a -> fixtures.models.b -> fixtures.models.a",
    ]
    rule = "(a test module imports only oracles, fixtures and tools)"
    assert imports_within_tests(tmp_path) == [
        f"tests.a.conftest imports .helpers {rule}",
        f"tests.a.test_x imports tests.a.helpers {rule}",
        f"tests.a.test_x imports tests.a {rule}",
    ]


# ----- the plugin and the harness know no subject by name --------------------------
SUBJECT_BLIND = ("fixtures.plugin", "fixtures.harness")


def subject_package_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a specific subject package (anything under ``fixtures.subjects.``; the
    registry ``fixtures.subjects`` itself is allowed) by a module of the plugin or the
    harness: they reach a subject only through the protocol's hooks (docs/subject-protocol.md)."""
    return [
        f"{module} imports {target}, a specific subject package"
        for module, imports in sorted(graph.items())
        if any(module == top or module.startswith(top + ".") for top in SUBJECT_BLIND)
        for target in sorted(imports)
        if target.startswith("fixtures.subjects.")
    ]


def test_plugin_and_harness_import_no_subject_package():
    assert subject_package_imports(import_graph(ROOT)) == []


def test_the_check_catches_a_subject_package_import(tmp_path):
    files = {
        "oracles/__init__.py": "",
        "fixtures/__init__.py": "",
        "fixtures/subjects/__init__.py": "KNOWN = {'vllm': 'fixtures.subjects.vllm.subject:VllmSubject'}\n",
        "fixtures/subjects/vllm/__init__.py": "",
        "fixtures/subjects/vllm/overlay.py": "",
        "fixtures/subjects/vllm/findings.py": "",
        "fixtures/plugin/hooks.py": "from fixtures.subjects import KNOWN\nfrom fixtures.subjects.vllm import overlay\n",
        "fixtures/harness/findings.py": "def f():\n    import fixtures.subjects.vllm.findings\n",
        "tools/report.py": "from fixtures.subjects.vllm import overlay\n",
    }
    write_tree(tmp_path, files)
    assert subject_package_imports(import_graph(tmp_path)) == [
        "fixtures.harness.findings imports fixtures.subjects.vllm.findings, a specific subject package",
        "fixtures.plugin.hooks imports fixtures.subjects.vllm, a specific subject package",
        "fixtures.plugin.hooks imports fixtures.subjects.vllm.overlay, a specific subject package",
    ]
