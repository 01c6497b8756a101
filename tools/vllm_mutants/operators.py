"""Mutation operators as data: each operator is one function in an ordered registry.

An operator is shown one :class:`Site` of a function at a time (a node of its
body, or one statement of one of its blocks) and yields the :class:`Change` s it
makes there: the node it replaces and by what, or a swap or a deletion of the
statement.  :func:`tools.vllm_mutants.generate.variants` asks every registered
operator of the site's kind at every site and names each change a
:class:`Variant` of that operator.  To add an operator: write one function and
register it with ``@operator("name")`` (``over="statement"`` for one that
moves or deletes statements); the order of registration is the order of
:data:`OPERATORS`, which orders the mutants made at one place.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tools.vllm_mutants.discover import is_docstring


# ----- what an operator makes -------------------------------------------------------------------
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


def node_at(root: ast.AST, path: tuple):
    """The node at ``path`` (a tuple of (field, index or None)) from ``root``."""
    node = root
    for name, index in path:
        node = getattr(node, name)
        if index is not None:
            node = node[index]
    return node


def _set(root: ast.AST, path: tuple, new: ast.AST) -> None:
    owner, (name, index) = node_at(root, path[:-1]), path[-1]
    if index is None:
        setattr(owner, name, new)
    else:
        getattr(owner, name)[index] = new


def apply_variant(func, variant: Variant):
    """A mutated deep copy of ``func``."""
    mutated = copy.deepcopy(func)
    if variant.kind == "replace":
        _set(mutated, variant.path, copy.deepcopy(variant.new))
    else:
        stmts = getattr(node_at(mutated, variant.path), variant.block)
        i = variant.index
        if variant.kind == "swap":
            stmts[i], stmts[i + 1] = stmts[i + 1], stmts[i]
        else:
            del stmts[i]
            if not stmts:
                stmts.append(ast.Pass())
    return mutated


# ----- where operators look ---------------------------------------------------------------------
_SKIPPED_FIELDS = {"annotation", "returns", "decorator_list", "type_comment", "type_params"}
_BLOCKS = ("body", "orelse", "finalbody")
HEADER_FIELDS = ("test", "iter", "target", "items")  # the fields of a compound statement's header
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _lines_of(node) -> tuple:
    return tuple(range(node.lineno, node.end_lineno + 1))


@dataclass(frozen=True)
class Change:
    """What an operator makes at a site, before it is named: a replacement of ``node`` (at ``path``)
    by ``new``, or a swap of the site's statement with the next one, or its deletion.  An
    ``equivalent`` change (equivalent by construction) is not generated."""

    kind: str  # "replace", "swap" or "delete"
    description: str
    node: ast.AST | None = None  # replace: the node replaced (its position orders the mutant)
    path: tuple = ()  # replace: that node's path
    new: ast.AST | None = None  # replace: what replaces it
    equivalent: bool = False


def _replace(node: ast.AST, path: tuple, new: ast.AST, description: str) -> Change:
    return Change("replace", description, node, path, new)


@dataclass(frozen=True)
class Site:
    """One place of ``func`` an operator is shown: a node of its body (``over`` "node": ``node`` at
    ``path``, inside statement ``stmt`` at ``stmt_path``), or statement ``index`` of the block
    ``block`` of the node at ``path`` (``over`` "statement": ``node`` is that statement)."""

    func: ast.AST
    node: ast.AST
    path: tuple
    stmt_path: tuple = ()
    stmt: ast.stmt | None = None
    block: str | None = None
    stmts: list | None = None
    index: int = 0

    @property
    def over(self) -> str:
        return "node" if self.block is None else "statement"

    def variant(self, operator: str, change: Change) -> Variant:
        """``change`` as a :class:`Variant` of ``operator``."""
        if change.kind == "replace":
            stmt, node = self.stmt, change.node
            simple = stmt is not None and not hasattr(stmt, "body")
            reach = _lines_of(stmt) if simple else (*_lines_of(node), *((stmt.lineno,) if stmt is not None else ()))
            position = (node.lineno, node.col_offset)
            return Variant(
                operator,
                "replace",
                change.path,
                position,
                change.description,
                new=change.new,
                stmt_path=self.stmt_path,
                reach=tuple(sorted(set(reach))),
            )
        a = self.node
        reach = (a.lineno, self.stmts[self.index + 1].lineno) if change.kind == "swap" else _lines_of(a)
        position = (a.lineno, a.col_offset)
        return Variant(
            operator,
            change.kind,
            self.path,
            position,
            change.description,
            block=self.block,
            index=self.index,
            reach=reach,
        )


def _nodes(func):
    """(node, path, innermost statement's path, that statement) for every node of ``func``'s body,
    nested defs excluded."""

    def visit(node, path, stmt_path, stmt):
        for name, value in ast.iter_fields(node):
            if name in _SKIPPED_FIELDS or (node is func and name == "args"):
                continue
            items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            for index, child in items:
                if not isinstance(child, ast.AST) or isinstance(child, NESTED):
                    continue
                child_path = (*path, (name, index))
                inner, inner_stmt = (child_path, child) if isinstance(child, ast.stmt) else (stmt_path, stmt)
                yield child, child_path, inner, inner_stmt
                yield from visit(child, child_path, inner, inner_stmt)

    yield from visit(func, (), (), None)


def sites(func) -> Iterator[Site]:
    """Every node site of ``func`` (in tree order), then every statement site of every block of
    ``func``, its own body included."""
    owners = [((), func)]
    for node, path, stmt_path, stmt in _nodes(func):
        yield Site(func, node, path, stmt_path, stmt)
        if isinstance(node, (ast.stmt, ast.excepthandler)):
            owners.append((path, node))
    for path, owner in owners:
        for name in _BLOCKS:
            stmts = getattr(owner, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                for i, stmt in enumerate(stmts):
                    yield Site(func, stmt, path, block=name, stmts=stmts, index=i)


# ----- the registry -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Operator:
    name: str
    over: str  # "node" or "statement": the sites it is shown
    make: Callable[[Site], Iterator[Change]]


REGISTRY: dict[str, Operator] = {}


def operator(name: str, over: str = "node"):
    """Register the decorated function as the operator ``name`` over ``over`` sites (in order)."""

    def register(make):
        if name in REGISTRY:
            raise ValueError(f"operator {name!r} registered twice")
        REGISTRY[name] = Operator(name, over, make)
        return make

    return register


# ----- the operators (registered in the order of OPERATORS) -------------------------------------
def _short(node: ast.AST, limit: int = 70) -> str:
    """The node's source on one line, cut at ``limit`` characters."""
    text = ast.unparse(node)
    first = text.split("\n", 1)[0]
    if len(first) > limit or first != text:
        return first[: limit - 3] + "..."
    return first


@operator("drop_clause")
def drop_clause(site: Site) -> Iterator[Change]:
    """Drops one operand of an ``and``/``or`` chain."""
    node = site.node
    if isinstance(node, ast.BoolOp):
        n = len(node.values)
        for i, dropped in enumerate(node.values):
            rest = [copy.deepcopy(v) for j, v in enumerate(node.values) if j != i]
            new = rest[0] if len(rest) == 1 else ast.BoolOp(copy.deepcopy(node.op), rest)
            yield _replace(node, site.path, new, f"drop clause {i + 1}/{n}: {_short(dropped)}")


_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


@operator("flip_compare")
def flip_compare(site: Site) -> Iterator[Change]:
    """Flips one operator of a comparison: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``."""
    node = site.node
    if isinstance(node, ast.Compare):
        for j, op in enumerate(node.ops):
            if type(op) in _FLIPS:
                new = copy.deepcopy(node)
                new.ops[j] = _FLIPS[type(op)]()
                flipped = _SYMBOL[_FLIPS[type(op)]]
                yield _replace(node, site.path, new, f"`{_SYMBOL[type(op)]}` -> `{flipped}`")


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


@operator("shift_index")
def shift_index(site: Site) -> Iterator[Change]:
    """Shifts a slice bound or an index of a subscript (not of a ``del``) by +1 and by -1."""
    node = site.node
    if not isinstance(node, ast.Subscript) or isinstance(node.ctx, ast.Del):
        return
    elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    base = (*site.path, ("slice", None))
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
                yield _replace(bound, bpath, new, f"{what} {_short(bound, 40)} -> {_short(new, 40)}")


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
        if isinstance(node, _EFFECTS + NESTED):
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


@operator("swap_statements", over="statement")
def swap_statements(site: Site) -> Iterator[Change]:
    """Swaps a statement with the next one of its block (neither a nested def or class, nor the
    function's docstring); the swap of two :func:`independent` statements is equivalent."""
    stmts, i = site.stmts, site.index
    a, b = stmts[i], stmts[i + 1] if i + 1 < len(stmts) else None
    movable = b is not None and not isinstance(a, NESTED) and not isinstance(b, NESTED)
    if movable and not (site.path == () and i == 0 and is_docstring(a)):
        text = f"swap lines {a.lineno} and {b.lineno}: {_short(a, 40)} / {_short(b, 40)}"
        yield Change("swap", text, equivalent=independent(a, b))


# Call statements never deleted: their only effect is output, which no property reads.
OUTPUT_ONLY_CALLS = re.compile(r"^(print|logger\.\w+|logging\.\w+|log\.\w+|warnings\.warn)$")


@operator("delete_call", over="statement")
def delete_call(site: Site) -> Iterator[Change]:
    """Deletes a call statement (``x.synchronize()``, ``x.fill_(...)``, ``f(..., out=...)``), not one
    of :data:`OUTPUT_ONLY_CALLS`; a block left empty becomes ``pass``."""
    stmt = site.node
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        if not OUTPUT_ONLY_CALLS.match(ast.unparse(stmt.value.func)):
            alone = " (block -> pass)" if len(site.stmts) == 1 else ""
            yield Change("delete", f"delete call {_short(stmt, 60)}" + alone)


_MIN_MAX = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum"}


@operator("swap_min_max")
def swap_min_max(site: Site) -> Iterator[Change]:
    """Calls the other of ``min``/``max``, or of a ``.minimum``/``.maximum`` (np, torch, tl)."""
    node = site.node
    if not isinstance(node, ast.Call):
        return
    callee = node.func
    name = callee.id if isinstance(callee, ast.Name) else callee.attr if isinstance(callee, ast.Attribute) else None
    if name in _MIN_MAX and (isinstance(callee, ast.Attribute) or name in ("min", "max")):
        new_func = copy.deepcopy(callee)
        if isinstance(new_func, ast.Name):
            new_func.id = _MIN_MAX[name]
        else:
            new_func.attr = _MIN_MAX[name]
        text = f"`{_short(callee)}` -> `{ast.unparse(new_func)}`"
        yield _replace(callee, (*site.path, ("func", None)), new_func, text)


@operator("const_0_1")
def const_0_1(site: Site) -> Iterator[Change]:
    """Turns an integer constant 0 into 1 and 1 into 0."""
    node = site.node
    if _int_constant(node) and node.value in (0, 1):
        yield _replace(node, site.path, ast.Constant(1 - node.value), f"{node.value} -> {1 - node.value}")


def _boolean_value(node) -> bool:
    return (
        isinstance(node, (ast.BoolOp, ast.Compare))
        or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
        or (isinstance(node, ast.Constant) and isinstance(node.value, bool))
    )


@operator("force_condition")
def force_condition(site: Site) -> Iterator[Change]:
    """Forces the condition of an ``if``, ``while`` or if-expression, or the boolean value an
    assignment stores, to ``True`` and to ``False`` (not to what it already is)."""
    node, path = site.node, site.path
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        keyword = {ast.If: "if", ast.While: "while", ast.IfExp: "if-expression"}[type(node)]
        for value in (True, False):
            if not (isinstance(node.test, ast.Constant) and node.test.value is value):
                text = f"{keyword} condition {_short(node.test, 50)} -> {value}"
                yield _replace(node.test, (*path, ("test", None)), ast.Constant(value), text)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _boolean_value(node.value):
        for value in (True, False):
            if not (isinstance(node.value, ast.Constant) and node.value.value is value):
                text = f"boolean value {_short(node.value, 50)} -> {value}"
                yield _replace(node.value, (*path, ("value", None)), ast.Constant(value), text)


# The operators, in the order that orders the mutants made at one place.
OPERATORS = tuple(REGISTRY)
