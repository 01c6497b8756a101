"""Every dotted name of the suite that a docstring or a page of docs/ cites still exists.

A reference such as ``fixtures.harness.compare.compare_state`` (in double
backticks, or a Sphinx role such as :func:`...`) is resolved by reading the
source (``ast``), never by importing it, so modules that need vLLM are checked
on a machine without it: the module's file must exist and define each further
name, as a top-level function, class, assignment or import, or, below a class,
as a method or class attribute.  Names outside the suite's packages (vLLM's,
torch's) are not checked here.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from fixtures import ROOT

PACKAGES = ("fixtures", "oracles", "tools")
NAMES = "|".join(PACKAGES)
REFERENCE = re.compile(rf"(?:``|:\w+:`~?|`)((?:{NAMES})(?:\.\w+)+)(?:\(\))?`")


def cited(text: str) -> set[str]:
    return set(REFERENCE.findall(text))


def docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    return "\n".join(filter(None, (ast.get_docstring(n, clean=False) for n in nodes)))


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _defined(body: list, name: str) -> bool:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and any(getattr(t, "id", None) == name for t in targets):
            return True
        if isinstance(node, ast.ImportFrom | ast.Import) and any((a.asname or a.name) == name for a in node.names):
            return True
        if isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional imports
            if _defined(node.body + getattr(node, "orelse", []), name):
                return True
    return False


def missing(reference: str) -> str | None:
    """Why ``reference`` does not resolve, or None."""
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):  # the longest prefix that is a module or package
        base = ROOT.joinpath(*parts[:cut])
        file = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if file.is_file():
            break
    else:
        return "no such module"
    rest = parts[cut:]
    if not rest:
        return None
    body = _tree(file).body
    for i, name in enumerate(rest):
        if not _defined(body, name):
            return f"{file.relative_to(ROOT)} defines no {'.'.join(rest[: i + 1])}"
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            return None if i == len(rest) - 1 else None  # an attribute of a non-class: not followed
        body = cls.body
    return None


def test_every_dotted_name_a_docstring_or_a_page_cites_exists():
    sources = [p for top in (*PACKAGES, "tests") for p in sorted((ROOT / top).rglob("*.py"))]
    pages = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    broken = []
    for path in sources + pages:
        text = docstrings(path) if path.suffix == ".py" else path.read_text()
        for reference in sorted(cited(text)):
            why = missing(reference)
            if why:
                broken.append(f"{path.relative_to(ROOT)}: {reference}: {why}")
    assert not broken, "stale references:\n  " + "\n  ".join(broken)


def test_the_check_finds_a_stale_reference():
    """It can fail: a moved function, a misspelt module, a method a class lacks."""
    assert missing("fixtures.harness.compare.compare_state") is None
    assert missing("fixtures.harness.step.compare_state") == "fixtures/harness/step.py defines no compare_state"
    assert missing("fixtures.no_such_module.x") == "fixtures/__init__.py defines no no_such_module"
    assert "defines no VllmSubject.no_method" in missing("fixtures.subjects.vllm.subject.VllmSubject.no_method")
    assert cited("see ``fixtures.protocol.StepResult`` and :func:`~oracles.split.split`") == {
        "fixtures.protocol.StepResult",
        "oracles.split.split",
    }
