"""What the change touched: the functions it changed, and the statements its diff adds or modifies.

Two scopes (``--scope``):

- ``lines`` (default with ``--base``): the statements of the overlay's files
  that the diff against the base adds or modifies (a statement whose own
  lines, or for a compound statement its header lines, hold a ``+`` line of
  the unified diff), plus the header of every compound statement they sit
  in.  The diff is the one ``diff -u`` shows: a block that only moved under a new
  ``if``/``else`` counts, since its lines changed.  A swap of two adjacent
  statements is in scope when either is a changed statement.
- ``function``: every statement of every function whose code differs from the
  base's (``ast.dump`` of the function without docstrings or positions, so
  formatting and comments do not count), and of every new function.

The base is ``--base DIR`` (a tree of vLLM's layout), else the installed
``vllm`` package, found with ``importlib.util.find_spec("vllm")``, which for a
top-level package imports nothing.
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib.util
import io
from dataclasses import dataclass, field
from pathlib import Path

from fixtures.subjects.vllm.loading.overlay import PACKAGE

SCOPES = ("lines", "function")


class MutantError(ValueError):
    """A mutant that cannot be made or an equivalence table that does not fit (message says why)."""


@dataclass(frozen=True)
class ChangedFunction:
    module: str
    relpath: str  # inside the overlay, e.g. vllm/v1/.../x.py
    qualname: str
    lineno: int
    end_lineno: int
    status: str  # "changed" or "new"


def read_source(path: Path) -> str:
    """The file's text, its line endings as they are."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def source_lines(text: str) -> list[str]:
    """Lines with their endings, split where ``ast`` counts lines (not at form feeds)."""
    return io.StringIO(text, newline="").readlines()


def functions_of(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of ``tree`` by qualified name (``Class.method``, ``outer.inner``)."""
    found = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[prefix + child.name] = child
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.stmt) or isinstance(child, ast.excepthandler):
                walk(child, prefix)  # functions defined under if/try/with

    walk(tree, "")
    return found


def is_docstring(stmt: ast.stmt) -> bool:
    """A statement that is a string alone (a docstring where it comes first in a body)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def normalised_dump(node: ast.AST) -> str:
    """``ast.dump`` without positions and without the docstrings of functions and classes."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            if n.body and is_docstring(n.body[0]):
                n.body = n.body[1:] or [ast.Pass()]
    return ast.dump(node, include_attributes=False)


def installed_file(relpath: str, base: Path | None = None) -> Path | None:
    """The release's file for ``relpath`` (``vllm/...``): under ``base``, else in the installed package.

    The installed package is found with ``importlib.util.find_spec("vllm")``: for a
    top-level package it searches ``sys.meta_path`` without importing anything.
    """
    if base is not None:
        candidate = Path(base) / relpath
        return candidate if candidate.is_file() else None
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MutantError(f"no installed {PACKAGE!r} package to compare the overlay with (or give --base=DIR)")
    inner = Path(relpath).relative_to(PACKAGE)
    for location in spec.submodule_search_locations:
        candidate = Path(location) / inner
        if candidate.is_file():
            return candidate
    return None


def changed_functions(new_source: str, old_source: str | None, module: str, relpath: str) -> list[ChangedFunction]:
    """Functions of ``new_source`` whose code differs from ``old_source``'s (None: a new file), in line order."""
    new = functions_of(ast.parse(new_source))
    old = functions_of(ast.parse(old_source)) if old_source is not None else {}
    out = []
    for qualname, node in new.items():
        if qualname not in old:
            status = "new"
        elif normalised_dump(node) != normalised_dump(old[qualname]):
            status = "changed"
        else:
            continue
        out.append(ChangedFunction(module, relpath, qualname, node.lineno, node.end_lineno, status))
    return sorted(out, key=lambda f: (f.lineno, f.qualname))


# ----- the line scope -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Hunk:
    """One hunk of the unified diff base -> overlay (3 lines of context, as ``diff -u``)."""

    relpath: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    text: str  # the hunk's lines, each prefixed with " ", "-" or "+"
    changed: tuple[int, ...]  # the overlay's line numbers of its "+" lines

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@"


def diff_hunks(old_source: str | None, new_source: str, relpath: str) -> list[Hunk]:
    """The hunks of the diff from ``old_source`` (None: a new file) to ``new_source``; a hunk's
    ``changed`` lines are its ``+`` lines that hold code (blank and comment-only lines do not)."""
    old, new = source_lines(old_source or ""), source_lines(new_source)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    hunks = []
    for group in matcher.get_grouped_opcodes(3):
        text, changed = [], []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                text += [" " + line for line in old[i1:i2]]
                continue
            text += ["-" + line for line in old[i1:i2]]
            text += ["+" + line for line in new[j1:j2]]
            changed += [j + 1 for j in range(j1, j2) if _code(new[j])]
        first, last = group[0], group[-1]
        hunks.append(
            Hunk(
                relpath,
                first[1] + 1 if last[2] > first[1] else first[1],
                last[2] - first[1],
                first[3] + 1 if last[4] > first[3] else first[3],
                last[4] - first[3],
                "".join(t if t.endswith("\n") else t + "\n" for t in text),
                tuple(changed),
            )
        )
    return hunks


def _code(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith("#")


def own_lines(stmt: ast.stmt) -> set[int]:
    """The lines a statement holds itself: all of a simple statement; a compound statement's header
    and its clause lines (``else:``, ``finally:``), not the statements of its blocks."""
    blocks = [b for name in ("body", "orelse", "finalbody", "handlers") for b in getattr(stmt, name, None) or ()]
    if not blocks:
        return set(range(stmt.lineno, stmt.end_lineno + 1))
    inner = set()
    for b in blocks:
        inner |= set(range(b.lineno, b.end_lineno + 1))
    return set(range(stmt.lineno, stmt.end_lineno + 1)) - inner


@dataclass
class LineScope:
    """The statements of one file the line scope mutates (module doc), by ``id()`` of their AST nodes."""

    changed: set[int] = field(default_factory=set)  # changed statements (own lines hold a "+" line)
    headers: set[int] = field(default_factory=set)  # compound statements around a changed statement
    touched: set[int] = field(default_factory=set)  # statements holding a changed line anywhere inside

    def statement(self, stmt) -> bool:
        return id(stmt) in self.changed

    def header(self, stmt) -> bool:
        return id(stmt) in self.changed or id(stmt) in self.headers

    def moved(self, a, b) -> bool:
        return id(a) in self.changed or id(b) in self.changed


def line_scope(tree: ast.AST, changed_lines: set[int]) -> LineScope:
    scope = LineScope()

    def visit(node, outer):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                if isinstance(child, ast.stmt) and own_lines(child) & changed_lines:
                    scope.changed.add(id(child))
                    scope.headers.update(outer)
                if set(range(child.lineno, child.end_lineno + 1)) & changed_lines:
                    scope.touched.add(id(child))
                visit(child, [*outer, id(child)])
            else:
                visit(child, outer)

    visit(tree, [])
    return scope
