"""Mutants: one-place mutations of the statements in scope (:mod:`tools.vllm_mutants.discover`).

Each mutant is made on a function's AST by one of :data:`OPERATORS`, then
written back as text replacing only the smallest statement (or compound
statement's header) it touched, so the rest of the file stays byte-identical
and the mutant prints as a one-hunk diff; the result is checked to parse to
exactly the mutated AST (else the whole function is written by
``ast.unparse``).  Mutants identical to an earlier one are dropped.  Order and
ids are deterministic: file, function line, node position, operator; id
``module:function:L<line>:<operator>:<k>``, where ``k`` counts every mutation
of that operator at that line (in scope or not), so an id names the same
mutant in both scopes.
"""

from __future__ import annotations

import ast
import copy
import difflib
import fnmatch
import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fixtures.subjects.vllm.overlay import PACKAGE, overlay_files
from tools.vllm_mutants.discover import (
    SCOPES,
    ChangedFunction,
    Hunk,
    LineScope,
    MutantError,
    _is_docstring,
    _lines,
    _read,
    changed_functions,
    diff_hunks,
    functions_of,
    installed_file,
    line_scope,
    normalised_dump,
)

OPERATORS = (
    "drop_clause",  # drop one operand of an and/or chain
    "flip_compare",  # < <-> <=, > <-> >=, == <-> !=
    "shift_index",  # a slice bound or an index +1 / -1
    "swap_statements",  # two adjacent statements of a block
    "delete_call",  # a call statement (x.synchronize(), x.fill_(...), f(..., out=...)); pass if the block empties
    "swap_min_max",  # min <-> max, np/torch/tl.minimum <-> maximum
    "const_0_1",  # an integer constant 0 <-> 1
    "force_condition",  # an if/while/if-expression condition, or a boolean assignment's value, -> True / False
)
# Call statements never deleted: their only effect is output, which no property reads.
OUTPUT_ONLY_CALLS = re.compile(r"^(print|logger\.\w+|logging\.\w+|log\.\w+|warnings\.warn)$")


# ----- 2. mutants -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One mutation of a function's AST, addressed by paths from the function node."""

    operator: str
    kind: str  # "replace" (node at path), "swap" (statements i, i+1 of a block) or "delete" (statement i)
    path: tuple  # replace: the node; swap/delete: the block's owner
    position: tuple  # (line, col) of the node, for ordering
    description: str
    new: ast.AST | None = None  # replace
    block: str | None = None  # swap/delete: the owner's field (body, orelse, finalbody)
    index: int = 0
    stmt_path: tuple = ()  # replace: the innermost statement holding the node
    reach: tuple = ()  # lines: the mutant is reached when any of them ran


@dataclass
class Mutant:
    id: str
    module: str
    relpath: str
    function: str
    function_status: str
    line: int
    operator: str
    description: str
    reach: tuple
    source: str = field(repr=False)
    diff: str = field(repr=False)
    splice: str = "statement"  # how the text was written: statement, header, lines or function


def _get(root: ast.AST, path: tuple):
    node = root
    for name, index in path:
        node = getattr(node, name)
        if index is not None:
            node = node[index]
    return node


def _set(root: ast.AST, path: tuple, new: ast.AST) -> None:
    owner, (name, index) = _get(root, path[:-1]), path[-1]
    if index is None:
        setattr(owner, name, new)
    else:
        getattr(owner, name)[index] = new


_SKIPPED_FIELDS = {"annotation", "returns", "decorator_list", "type_comment", "type_params"}
_BLOCKS = ("body", "orelse", "finalbody")
_HEADER_FIELDS = ("test", "iter", "target", "items")
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _nodes(func):
    """(node, path, innermost statement's path) for every node of ``func``'s body, nested defs excluded."""

    def visit(node, path, stmt_path):
        for name, value in ast.iter_fields(node):
            if name in _SKIPPED_FIELDS or (node is func and name == "args"):
                continue
            items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            for index, child in items:
                if not isinstance(child, ast.AST) or isinstance(child, _NESTED):
                    continue
                child_path = (*path, (name, index))
                inner = child_path if isinstance(child, ast.stmt) else stmt_path
                yield child, child_path, inner
                yield from visit(child, child_path, inner)

    yield from visit(func, (), ())


def _blocks(func):
    """(owner path, field, statements) for every statement block of ``func``, its own body included."""
    owners = [((), func)] + [(p, n) for n, p, _ in _nodes(func) if isinstance(n, (ast.stmt, ast.excepthandler))]
    for path, owner in owners:
        for name in _BLOCKS:
            stmts = getattr(owner, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield path, name, stmts


def _int_constant(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _shifted(expr: ast.expr, delta: int) -> ast.expr:
    """``expr + delta``, folded into a constant or an existing ``+ c`` / ``- c``."""
    if _int_constant(expr):
        value = expr.value + delta
        return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and _int_constant(expr.operand):
        value = -expr.operand.value + delta
        return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)) and _int_constant(expr.right):
        c = expr.right.value if isinstance(expr.op, ast.Add) else -expr.right.value
        c += delta
        if c == 0:
            return copy.deepcopy(expr.left)
        op = ast.Add() if c > 0 else ast.Sub()
        return ast.BinOp(copy.deepcopy(expr.left), op, ast.Constant(abs(c)))
    return ast.BinOp(copy.deepcopy(expr), ast.Add() if delta > 0 else ast.Sub(), ast.Constant(1))


def _index_like(node) -> bool:
    """An index that may be an integer (never a string key, ``...`` or ``None``)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    return not isinstance(node, (ast.Tuple, ast.Slice, ast.JoinedStr, ast.List, ast.Dict, ast.Set))


_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MIN_MAX = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum"}


def _short(node: ast.AST, limit: int = 70) -> str:
    """The node's source on one line, cut at ``limit`` characters."""
    text = ast.unparse(node)
    first = text.split("\n", 1)[0]
    if len(first) > limit or first != text:
        return first[: limit - 3] + "..."
    return first


def _lines_of(node) -> tuple:
    return tuple(range(node.lineno, node.end_lineno + 1))


def _boolean_value(node) -> bool:
    return (
        isinstance(node, (ast.BoolOp, ast.Compare))
        or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
        or (isinstance(node, ast.Constant) and isinstance(node.value, bool))
    )


_EFFECTS = (
    ast.Call,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,
    ast.Delete,
    ast.Global,
    ast.Nonlocal,
    ast.Return,
    ast.Raise,
    ast.Break,
    ast.Continue,
    ast.Assert,
    ast.Import,
    ast.ImportFrom,
)


def _dotted(node) -> str | None:
    """``a.b.c`` of a chain of attribute reads on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _plain_effects(stmt: ast.stmt) -> tuple[set, set] | None:
    """(dotted names read, names bound) of a statement that calls nothing, transfers no control and
    stores only into local names or attributes of ``self``; None for any other statement.  An
    attribute chain (``cfg.x.y``) counts as one read."""
    reads, binds, chained = set(), set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, _EFFECTS + _NESTED):
            return None
        if id(node) in chained:
            continue
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            name = _dotted(node) if isinstance(node, ast.Attribute) else None
            if name is None or name.count(".") != 1 or not name.startswith("self."):
                return None
            binds.add(name)
            chained.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.Attribute) and _dotted(node) is not None:
            reads.add(_dotted(node))
            chained.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
    if isinstance(stmt, ast.AugAssign):
        reads |= binds
    return reads, binds


def _overlap(names: set, others: set) -> bool:
    return any(a == b or a.startswith(b + ".") or b.startswith(a + ".") for a in names for b in others)


def independent(a: ast.stmt, b: ast.stmt) -> bool:
    """Swapping ``a`` and ``b`` cannot change anything: both call nothing and store only into
    local names or attributes of ``self`` (:func:`_plain_effects`; operators and attribute reads
    assumed free of side effects), neither touches a name the other binds, and a statement that
    stores into ``self`` faces one that reads nothing of ``self`` (an attribute read of ``self``
    may be a property computed from what the other stores)."""
    ea, eb = _plain_effects(a), _plain_effects(b)
    if ea is None or eb is None:
        return False
    (ra, ba), (rb, bb) = ea, eb
    if _overlap(ba, rb | bb) or _overlap(bb, ra):
        return False
    stores_self_a, stores_self_b = (any(n.startswith("self.") for n in bound) for bound in (ba, bb))
    return not (stores_self_a and _overlap(rb, {"self"})) and not (stores_self_b and _overlap(ra, {"self"}))


def variants(func, skipped: list | None = None) -> list[Variant]:
    """Every mutation of ``func`` by :data:`OPERATORS`, in (position, operator, generation) order.

    Not generated (appended to ``skipped``): swaps of two :func:`independent` statements, which
    are equivalent by construction."""
    out: list[Variant] = []
    stmt_of = {}

    def replace(operator, node, path, stmt_path, new, description):
        stmt = stmt_of[stmt_path] if stmt_path else None
        simple = stmt is not None and not hasattr(stmt, "body")
        reach = _lines_of(stmt) if simple else (*_lines_of(node), *((stmt.lineno,) if stmt is not None else ()))
        out.append(
            Variant(
                operator,
                "replace",
                path,
                (node.lineno, node.col_offset),
                description,
                new=new,
                stmt_path=stmt_path,
                reach=tuple(sorted(set(reach))),
            )
        )

    for node, path, _ in _nodes(func):
        if isinstance(node, ast.stmt):
            stmt_of[path] = node
    for node, path, stmt_path in _nodes(func):
        if isinstance(node, ast.BoolOp):
            n = len(node.values)
            for i, dropped in enumerate(node.values):
                rest = [copy.deepcopy(v) for j, v in enumerate(node.values) if j != i]
                new = rest[0] if len(rest) == 1 else ast.BoolOp(copy.deepcopy(node.op), rest)
                replace("drop_clause", node, path, stmt_path, new, f"drop clause {i + 1}/{n}: {_short(dropped)}")
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in _FLIPS:
                    new = copy.deepcopy(node)
                    new.ops[j] = _FLIPS[type(op)]()
                    flipped = _SYMBOL[_FLIPS[type(op)]]
                    replace("flip_compare", node, path, stmt_path, new, f"`{_SYMBOL[type(op)]}` -> `{flipped}`")
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Del):
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            base = (*path, ("slice", None))
            for e, element in enumerate(elements):
                epath = (*base, ("elts", e)) if isinstance(node.slice, ast.Tuple) else base
                if isinstance(element, ast.Slice):
                    bounds = [(f"{b} bound", (*epath, (b, None)), getattr(element, b)) for b in ("lower", "upper")]
                elif _index_like(element):
                    bounds = [("index", epath, element)]
                else:
                    bounds = []
                for what, bpath, bound in bounds:
                    if bound is None:
                        continue
                    for delta in (1, -1):
                        new = _shifted(bound, delta)
                        text = f"{what} {_short(bound, 40)} -> {_short(new, 40)}"
                        replace("shift_index", bound, bpath, stmt_path, new, text)
        if isinstance(node, ast.Call):
            callee = node.func
            name = (
                callee.id
                if isinstance(callee, ast.Name)
                else callee.attr
                if isinstance(callee, ast.Attribute)
                else None
            )
            if name in _MIN_MAX and (isinstance(callee, ast.Attribute) or name in ("min", "max")):
                new_func = copy.deepcopy(callee)
                if isinstance(new_func, ast.Name):
                    new_func.id = _MIN_MAX[name]
                else:
                    new_func.attr = _MIN_MAX[name]
                text = f"`{_short(callee)}` -> `{ast.unparse(new_func)}`"
                replace("swap_min_max", callee, (*path, ("func", None)), stmt_path, new_func, text)
        if _int_constant(node) and node.value in (0, 1):
            replace(
                "const_0_1", node, path, stmt_path, ast.Constant(1 - node.value), f"{node.value} -> {1 - node.value}"
            )
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            test_path = (*path, ("test", None))
            keyword = {ast.If: "if", ast.While: "while", ast.IfExp: "if-expression"}[type(node)]
            for value in (True, False):
                if not (isinstance(node.test, ast.Constant) and node.test.value is value):
                    text = f"{keyword} condition {_short(node.test, 50)} -> {value}"
                    replace("force_condition", node.test, test_path, stmt_path, ast.Constant(value), text)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _boolean_value(node.value):
            for value in (True, False):
                if not (isinstance(node.value, ast.Constant) and node.value.value is value):
                    text = f"boolean value {_short(node.value, 50)} -> {value}"
                    value_path = (*path, ("value", None))
                    replace("force_condition", node.value, value_path, stmt_path, ast.Constant(value), text)

    for owner_path, block, stmts in _blocks(func):
        for i, stmt in enumerate(stmts):
            a, b = stmt, stmts[i + 1] if i + 1 < len(stmts) else None
            movable = b is not None and not isinstance(a, _NESTED) and not isinstance(b, _NESTED)
            if movable and not (owner_path == () and i == 0 and _is_docstring(a)):
                swap = Variant(
                    "swap_statements",
                    "swap",
                    owner_path,
                    (a.lineno, a.col_offset),
                    f"swap lines {a.lineno} and {b.lineno}: {_short(a, 40)} / {_short(b, 40)}",
                    block=block,
                    index=i,
                    reach=(a.lineno, b.lineno),
                )
                if not independent(a, b):
                    out.append(swap)
                elif skipped is not None:
                    skipped.append(swap)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                callee = ast.unparse(stmt.value.func)
                if not OUTPUT_ONLY_CALLS.match(callee):
                    text = f"delete call {_short(stmt, 60)}" + (" (block -> pass)" if len(stmts) == 1 else "")
                    out.append(
                        Variant(
                            "delete_call",
                            "delete",
                            owner_path,
                            (stmt.lineno, stmt.col_offset),
                            text,
                            block=block,
                            index=i,
                            reach=_lines_of(stmt),
                        )
                    )
    order = {op: i for i, op in enumerate(OPERATORS)}
    # sorted() is stable: variants at one place by one operator keep their generation order.
    return sorted(out, key=lambda v: (v.position, order[v.operator]))


def apply_variant(func, variant: Variant):
    """A mutated deep copy of ``func``."""
    mutated = copy.deepcopy(func)
    if variant.kind == "replace":
        _set(mutated, variant.path, copy.deepcopy(variant.new))
    else:
        stmts = getattr(_get(mutated, variant.path), variant.block)
        i = variant.index
        if variant.kind == "swap":
            stmts[i], stmts[i + 1] = stmts[i + 1], stmts[i]
        else:
            del stmts[i]
            if not stmts:
                stmts.append(ast.Pass())
    return mutated


# -- writing a mutated function back as text --
def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def _owns_lines(lines: list[str], node) -> bool:
    """``node`` alone on its lines: only indentation before it, only a comment after it."""
    first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]
    before = first[: _char_col(first, node.col_offset)]
    after = last[_char_col(last, node.end_col_offset) :].strip()
    return not before.strip() and (not after or after.startswith("#"))


def _header_colon(lines: list[str], stmt) -> tuple[int, int] | None:
    """(0-based row, column after it) of the ``:`` that ends ``stmt``'s header."""
    start = stmt.lineno - 1
    stop = stmt.body[0].lineno if stmt.body else len(lines)
    text = "".join(lines[start:stop])
    depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth -= 1
                elif tok.string == ":" and depth == 0:
                    return start + tok.end[0] - 1, tok.end[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return None


def _splice_text(lines: list[str], func, variant: Variant, mutated) -> tuple[list[str], str] | None:
    """The file's lines with only the touched statement(s) rewritten, or None when that is not possible."""
    if variant.kind in ("swap", "delete"):
        stmts = getattr(_get(func, variant.path), variant.block)
        i = variant.index
        touched = stmts[i : i + 2] if variant.kind == "swap" else [stmts[i]]
        if not all(_owns_lines(lines, s) for s in touched):
            return None
        if variant.kind == "swap":
            a, b = touched
            if a.end_lineno >= b.lineno:
                return None
            a0, a1, b0, b1 = a.lineno - 1, a.end_lineno, b.lineno - 1, b.end_lineno
            return lines[:a0] + lines[b0:b1] + lines[a1:b0] + lines[a0:a1] + lines[b1:], "lines"
        s = touched[0]
        s0, s1 = s.lineno - 1, s.end_lineno
        replacement = []
        if len(stmts) == 1:
            first = lines[s0]
            ending = first[len(first.rstrip("\r\n")) :] or "\n"
            replacement = [first[: _char_col(first, s.col_offset)] + "pass" + ending]
        return lines[:s0] + replacement + lines[s1:], "lines"

    stmt = _get(func, variant.stmt_path)
    new_stmt = _get(mutated, variant.stmt_path)
    s0 = stmt.lineno - 1
    first = lines[s0]
    prefix = first[: _char_col(first, stmt.col_offset)]
    if prefix.strip():
        return None
    if not hasattr(stmt, "body"):  # a simple statement
        if not _owns_lines(lines, stmt):
            return None
        text = ast.unparse(new_stmt)
        last = lines[stmt.end_lineno - 1]
        if "\n" in text:
            return None
        suffix = last[_char_col(last, stmt.end_col_offset) :]
        return lines[:s0] + [prefix + text + suffix] + lines[stmt.end_lineno :], "statement"
    field_name = variant.path[len(variant.stmt_path)][0]
    if field_name not in _HEADER_FIELDS:
        return None
    bare = copy.copy(new_stmt)
    for name in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(bare, name):
            setattr(bare, name, [ast.Pass()] if name == "body" else [])
    header = ast.unparse(bare).rsplit("\n", 1)[0]
    if "\n" in header:
        return None
    if isinstance(stmt, ast.If) and first[len(prefix) :].startswith("elif"):
        header = "el" + header
    colon = _header_colon(lines, stmt)
    if colon is None:
        return None
    row, col = colon
    rest = lines[row][col:]
    if rest.strip() and not rest.strip().startswith("#"):
        return None  # the body is on the header's line
    return lines[:s0] + [prefix + header + rest] + lines[row + 1 :], "header"


def _first_line(func) -> int:
    return min([d.lineno for d in func.decorator_list] + [func.lineno])


def _splice_function(lines: list[str], func, mutated) -> list[str]:
    indent = lines[func.lineno - 1][: _char_col(lines[func.lineno - 1], func.col_offset)]
    body = [indent + line + "\n" if line else "\n" for line in ast.unparse(mutated).split("\n")]
    return lines[: _first_line(func) - 1] + body + lines[func.end_lineno :]


def _reparsed(lines: list[str], func, new_lines: list[str]):
    """The function as ``new_lines`` now spell it (parsed from its own lines), or None.

    Also checks that every line outside the function is as it was."""
    start, end = _first_line(func) - 1, func.end_lineno + len(new_lines) - len(lines)
    if new_lines[:start] != lines[:start] or new_lines[end:] != lines[func.end_lineno :]:
        return None
    text = "".join(new_lines[start:end])
    try:
        tree = ast.parse("if 1:\n" + text if func.col_offset else text)
    except SyntaxError:
        return None
    node = tree.body[0].body[0] if func.col_offset else tree.body[0]
    return node if isinstance(node, type(func)) and node.name == func.name else None


def mutate_function(lines: list[str], func, variant: Variant) -> tuple[list[str], str]:
    """The file's ``lines`` with ``variant`` applied to ``func``: (new lines, how it was spliced).

    The text is checked to parse back to exactly the mutated function; where the statement-level
    splice cannot be made or does not check, the whole function is written by ``ast.unparse``."""
    mutated = apply_variant(func, variant)
    spliced = _splice_text(lines, func, variant, mutated)
    if spliced is not None:
        found = _reparsed(lines, func, spliced[0])
        if found is not None and ast.dump(found) == ast.dump(mutated):
            return spliced
    new_lines = _splice_function(lines, func, mutated)
    found = _reparsed(lines, func, new_lines)
    if found is None or normalised_dump(found) != normalised_dump(mutated):
        raise MutantError(f"{func.name}: cannot write mutant {variant.operator} at line {variant.position[0]} back")
    return new_lines, "function"


def _short_module(module: str, modules: list[str]) -> str:
    last = module.rsplit(".", 1)[-1]
    clash = sum(m.rsplit(".", 1)[-1] == last for m in modules) > 1
    return module.removeprefix(PACKAGE + ".") if clash else last


def one_hunk_diff(old: list[str], new: list[str], relpath: str, context: int = 3) -> str:
    """A unified diff of one hunk: the changed region (first to last differing line) with context."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[-1 - q] == new[-1 - q]:
        q += 1
    start = max(0, p - context)
    old_region, new_region = old[start : len(old) - q + context], new[start : len(new) - q + context]
    body = list(difflib.unified_diff(old_region, new_region, n=max(len(old_region), len(new_region))))[2:]
    if not body:
        return ""
    header = f"@@ -{start + 1},{len(old_region)} +{start + 1},{len(new_region)} @@\n"
    body = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body[1:]]
    return f"--- a/{relpath}\n+++ b/{relpath}\n" + header + "".join(body)


@dataclass
class Generation:
    functions: list[ChangedFunction]  # the functions mutated (line scope: those holding a changed line)
    mutants: list[Mutant]
    duplicates: int = 0  # mutants identical to an earlier one, dropped
    skipped: dict = field(default_factory=dict)  # not generated in scope, by reason (see variants())
    scope: str = "function"
    hunks: list[Hunk] = field(default_factory=list)  # the diff base -> overlay


def in_scope(func, variant: Variant, scope: LineScope | None) -> bool:
    """Whether ``variant`` of ``func`` mutates a statement of the line ``scope`` (None: every one)."""
    if scope is None:
        return True
    if variant.kind == "replace":
        stmt = _get(func, variant.stmt_path) if variant.stmt_path else func
        inner = variant.path[len(variant.stmt_path)][0] if len(variant.path) > len(variant.stmt_path) else None
        return scope.header(stmt) if hasattr(stmt, "body") and inner in _HEADER_FIELDS else scope.statement(stmt)
    stmts = getattr(_get(func, variant.path), variant.block)
    if variant.kind == "swap":
        return scope.moved(stmts[variant.index], stmts[variant.index + 1])
    return scope.statement(stmts[variant.index])


def generate(overlay: Path, base: Path | None = None, variants_of=variants, scope: str = "function") -> Generation:
    """Every mutant of the overlay's statements in ``scope`` (:data:`SCOPES`), in a deterministic order."""
    if scope not in SCOPES:
        raise MutantError(f"scope must be one of {SCOPES}, got {scope!r}")
    overlay = Path(overlay)
    files = overlay_files(overlay)
    modules = [f.module for f in files]
    functions, mutants, hunks, duplicates, skipped = [], [], [], 0, Counter()
    for entry in files:  # sorted by module name
        relpath = entry.path.relative_to(overlay.resolve()).as_posix()
        source = _read(entry.path)
        release = installed_file(relpath, base)
        old_source = _read(release) if release else None
        changed = changed_functions(source, old_source, entry.module, relpath)
        tree = ast.parse(source)
        tree_functions = functions_of(tree)
        file_hunks = diff_hunks(old_source, source, relpath)
        hunks += file_hunks
        lines_scope = None
        if scope == "lines":
            lines_scope = line_scope(tree, {line for h in file_hunks for line in h.changed})
            status = {f.qualname: f.status for f in changed}
            changed = [
                ChangedFunction(entry.module, relpath, name, node.lineno, node.end_lineno, status.get(name, "changed"))
                for name, node in tree_functions.items()
                if id(node) in lines_scope.touched
            ]
            changed.sort(key=lambda f: (f.lineno, f.qualname))
        functions += changed
        lines = _lines(source)
        short = _short_module(entry.module, modules)
        seen = {source}
        counters: Counter = Counter()
        for fn in changed:
            func = tree_functions[fn.qualname]
            not_generated: list = []
            generated = variants_of(func, not_generated)
            skipped["independent_swaps"] += sum(in_scope(func, v, lines_scope) for v in not_generated)
            for variant in generated:
                line = variant.position[0]
                counters[(fn.qualname, line, variant.operator)] += 1
                k = counters[(fn.qualname, line, variant.operator)]
                if not in_scope(func, variant, lines_scope):
                    continue
                new_lines, how = mutate_function(lines, func, variant)
                text = "".join(new_lines)
                if text in seen:
                    duplicates += 1
                    continue
                seen.add(text)
                diff = one_hunk_diff(lines, new_lines, relpath)
                mutants.append(
                    Mutant(
                        id=f"{short}:{fn.qualname}:L{line}:{variant.operator}:{k}",
                        module=entry.module,
                        relpath=relpath,
                        function=fn.qualname,
                        function_status=fn.status,
                        line=line,
                        operator=variant.operator,
                        description=variant.description,
                        reach=variant.reach,
                        source=text,
                        diff=diff,
                        splice=how,
                    )
                )
    return Generation(functions, mutants, duplicates, dict(skipped), scope=scope, hunks=hunks)


def sample(mutants: list, n: int | None) -> list:
    """``n`` mutants evenly spaced over the ordered list (all of them when ``n`` is None or larger)."""
    if n is None or n >= len(mutants):
        return list(mutants)
    if n <= 0:
        return []
    return [mutants[(i * len(mutants)) // n] for i in range(n)]


def select(mutants: list, patterns: list[str]) -> list:
    """The mutants whose id matches one of the ``fnmatch`` patterns (all when none is given)."""
    if not patterns:
        return list(mutants)
    return [m for m in mutants if any(fnmatch.fnmatchcase(m.id, p) for p in patterns)]


def every_id(overlay: Path) -> set[str]:
    """The id of every mutation of every function of the overlay's files, in any scope: what an
    :data:`~tools.vllm_mutants.equivalent.EQUIVALENT` entry may name (nothing is spliced)."""
    overlay = Path(overlay)
    files = overlay_files(overlay)
    modules = [f.module for f in files]
    ids = set()
    for entry in files:
        short = _short_module(entry.module, modules)
        for qualname, func in functions_of(ast.parse(_read(entry.path))).items():
            counters: Counter = Counter()
            for variant in variants(func):
                key = (variant.position[0], variant.operator)
                counters[key] += 1
                ids.add(f"{short}:{qualname}:L{key[0]}:{key[1]}:{counters[key]}")
    return ids
