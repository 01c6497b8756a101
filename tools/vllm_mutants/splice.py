"""Writing a mutated function back as text: only the smallest statement (or compound statement's
header) a :class:`~tools.vllm_mutants.operators.Variant` touched is rewritten, so the rest of the
file stays byte-identical and the mutant prints as a one-hunk diff (:func:`one_hunk_diff`).  The
text is checked to parse to exactly the mutated AST; where it cannot be made so, the whole function
is written by ``ast.unparse``.
"""

from __future__ import annotations

import ast
import copy
import difflib
import io
import tokenize

from tools.vllm_mutants.discover import MutantError, normalised_dump
from tools.vllm_mutants.operators import HEADER_FIELDS, Variant, apply_variant, node_at


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
        stmts = getattr(node_at(func, variant.path), variant.block)
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

    stmt = node_at(func, variant.stmt_path)
    new_stmt = node_at(mutated, variant.stmt_path)
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
    if field_name not in HEADER_FIELDS:
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
