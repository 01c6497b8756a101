"""Mutants: one-place mutations of the statements in scope (:mod:`tools.vllm_mutants.discover`).

Each mutant is made on a function's AST by one of :data:`OPERATORS` (the registry of
:mod:`tools.vllm_mutants.operators`), then written back as text
(:mod:`tools.vllm_mutants.splice`).  Mutants identical to an earlier one are dropped.  Order and
ids are deterministic: file, function line, node position, operator; id
``module:function:L<line>:<operator>:<k>`` (:func:`mutant_id`), where ``k`` counts every mutation
of that operator at that line (in scope or not), so an id names the same mutant in both scopes.
"""

from __future__ import annotations

import ast
import fnmatch
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fixtures.subjects.vllm.loading.overlay import PACKAGE, overlay_files
from tools.vllm_mutants.discover import (
    SCOPES,
    ChangedFunction,
    Hunk,
    LineScope,
    MutantError,
    changed_functions,
    diff_hunks,
    functions_of,
    installed_file,
    line_scope,
    read_source,
    source_lines,
)
from tools.vllm_mutants.operators import HEADER_FIELDS, OPERATORS, REGISTRY, Variant, node_at, sites
from tools.vllm_mutants.splice import mutate_function, one_hunk_diff


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


def variants(func, skipped: list | None = None) -> list[Variant]:
    """Every mutation of ``func`` by :data:`OPERATORS`, in (position, operator, generation) order.

    Not generated (appended to ``skipped``): changes equivalent by construction (swaps of two
    :func:`~tools.vllm_mutants.operators.independent` statements)."""
    out: list[Variant] = []
    for site in sites(func):
        for op in REGISTRY.values():
            if op.over == site.over:
                for change in op.make(site):
                    if not change.equivalent:
                        out.append(site.variant(op.name, change))
                    elif skipped is not None:
                        skipped.append(site.variant(op.name, change))
    order = {op: i for i, op in enumerate(OPERATORS)}
    # sorted() is stable: variants at one place by one operator keep their generation order.
    return sorted(out, key=lambda v: (v.position, order[v.operator]))


def numbered(generated: Iterable[Variant]) -> Iterator[tuple[int, Variant]]:
    """(k, variant) for each variant of one function: ``k`` counts the variants of its operator at
    its line so far, from 1."""
    counters: Counter = Counter()
    for variant in generated:
        key = (variant.position[0], variant.operator)
        counters[key] += 1
        yield counters[key], variant


def mutant_id(short_module: str, qualname: str, variant: Variant, k: int) -> str:
    """``module:function:L<line>:<operator>:<k>``: what reports and the equivalence table name."""
    return f"{short_module}:{qualname}:L{variant.position[0]}:{variant.operator}:{k}"


def _short_module(module: str, modules: list[str]) -> str:
    last = module.rsplit(".", 1)[-1]
    clash = sum(m.rsplit(".", 1)[-1] == last for m in modules) > 1
    return module.removeprefix(PACKAGE + ".") if clash else last


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
        stmt = node_at(func, variant.stmt_path) if variant.stmt_path else func
        inner = variant.path[len(variant.stmt_path)][0] if len(variant.path) > len(variant.stmt_path) else None
        return scope.header(stmt) if hasattr(stmt, "body") and inner in HEADER_FIELDS else scope.statement(stmt)
    stmts = getattr(node_at(func, variant.path), variant.block)
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
        source = read_source(entry.path)
        release = installed_file(relpath, base)
        old_source = read_source(release) if release else None
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
        lines = source_lines(source)
        short = _short_module(entry.module, modules)
        seen = {source}
        for fn in changed:
            func = tree_functions[fn.qualname]
            not_generated: list = []
            generated = variants_of(func, not_generated)
            skipped["independent_swaps"] += sum(in_scope(func, v, lines_scope) for v in not_generated)
            for k, variant in numbered(generated):
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
                        id=mutant_id(short, fn.qualname, variant, k),
                        module=entry.module,
                        relpath=relpath,
                        function=fn.qualname,
                        function_status=fn.status,
                        line=variant.position[0],
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
        for qualname, func in functions_of(ast.parse(read_source(entry.path))).items():
            ids.update(mutant_id(short, qualname, variant, k) for k, variant in numbered(variants(func)))
    return ids
