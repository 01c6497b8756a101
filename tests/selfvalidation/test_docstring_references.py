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
import importlib
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
    assert "defines no VllmSubject.no_method" in missing(
        "fixtures.subjects.vllm_rocm_aiter_sparse.subject.VllmSubject.no_method"
    )
    assert cited("see ``fixtures.protocol.StepResult`` and :func:`~oracles.split.split`") == {
        "fixtures.protocol.StepResult",
        "oracles.split.split",
    }


# A bare name in a Sphinx role (:func:`name`) resolves in the docstring's own module; a name that module lists
# as moved (``__getattr__ = moved_names(__name__, {name: new_home})``, fixtures/moved.py) resolves only through
# the deprecation shim, so a docstring citing it bare points at the old home.
BARE = re.compile(r":\w+:`~?(\w+)(?:\(\))?`")


def moved_away(path: Path) -> dict[str, str]:
    """``{name: new home}`` of the names ``path``'s module lists as moved (``moved_names``), else ``{}``."""
    for node in _tree(path).body:
        value = node.value if isinstance(node, ast.Assign) else None
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "moved_names" and len(value.args) > 1:
            homes = value.args[1]
            if isinstance(homes, ast.Dict):
                pairs = zip(homes.keys, homes.values, strict=True)  # a ``**mapping`` entry has no key: not read
                return {
                    k.value: v.value for k, v in pairs if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                }
    return {}


def bare_moved(path: Path) -> list[str]:
    """The bare names ``path``'s docstrings cite that its module lists as moved."""
    moved = moved_away(path)
    return sorted({f"{name} (moved to {moved[name]})" for name in BARE.findall(docstrings(path)) if name in moved})


def test_no_docstring_cites_a_moved_name_by_its_old_home():
    sources = [p for top in PACKAGES for p in sorted((ROOT / top).rglob("*.py"))]
    stale = [f"{p.relative_to(ROOT)}: {why}" for p in sources for why in bare_moved(p)]
    assert not stale, "docstrings citing a moved name bare (cite it by its new home):\n  " + "\n  ".join(stale)


def test_the_moved_name_check_finds_one(tmp_path):
    module = tmp_path / "old_home.py"
    module.write_text(
        '''"""See :func:`check_subject` and :func:`kept`."""\n'''
        "from fixtures.moved import moved_names\n"
        "def kept(): ...\n"
        '__getattr__ = moved_names(__name__, {"check_subject": "fixtures.subjects"})\n'
    )
    assert bare_moved(module) == ["check_subject (moved to fixtures.subjects)"]


# ----- what the docs list and cite, against the code ----------------------------------------------
# A page lists a registry of the code between ``<!-- lists: DOTTED.NAME -->`` and ``<!-- /lists -->``:
# every key of the dict named, and nothing else, must be written there in backticks (in a table, with
# ``column N``: in the N-th cell of each row).  So a catalogue entry, an edit or a subject added to the
# code and not to its page, or one left on the page after the code dropped it, fails here.
LISTS = re.compile(r"<!-- lists: ([\w.]+)(?: column (\d+))? -->\n(.*?)<!-- /lists -->", re.S)
LISTED = re.compile(r"`([A-Za-z_][\w-]*)`")
TEST_NAME = re.compile(r"\btest_\w+\b")


def listed(block: str, column: int | None) -> list[str]:
    if column is None:
        return LISTED.findall(block)
    rows = [line.split("|")[1:-1] for line in block.splitlines() if line.startswith("|")]
    cells = [row[column - 1] for row in rows[2:] if len(row) >= column]  # past the header and its rule
    return [name for cell in cells for name in LISTED.findall(cell)]


def registry(dotted: str) -> list[str]:
    module, _, name = dotted.rpartition(".")
    return list(getattr(importlib.import_module(module), name))


def list_problems(text: str) -> list[str]:
    problems = []
    for dotted, column, block in LISTS.findall(text):
        names, keys = listed(block, int(column) if column else None), registry(dotted)
        for name in sorted(set(keys) - set(names)):
            problems.append(f"{dotted}: {name!r} is not listed")
        for name in sorted(set(names) - set(keys)):
            problems.append(f"{dotted}: {name!r} is listed but not in it")
        problems += [f"{dotted}: {name!r} is listed twice" for name in sorted({n for n in names if names.count(n) > 1})]
    return problems


def test_every_registry_a_page_lists_is_listed_whole():
    pages = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    problems = [f"{p.relative_to(ROOT)}: {why}" for p in pages for why in list_problems(p.read_text())]
    assert not problems, "\n  ".join(["pages out of step with the code:", *problems])
    assert sum(len(LISTS.findall(p.read_text())) for p in pages) >= 4, "the catalogue's lists lost their markers"


def test_every_test_a_page_cites_exists():
    """A test named on a page (``test_...``) is a test module, function or class under tests/."""
    defined = set()
    for path in (ROOT / "tests").rglob("*.py"):
        defined.add(path.stem)
        defined.update(n.name for n in ast.walk(_tree(path)) if isinstance(n, ast.FunctionDef | ast.ClassDef))
    pages = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    stale = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in pages
        for name in sorted(set(TEST_NAME.findall(p.read_text())) - defined)
    ]
    assert not stale, "pages cite tests that do not exist:\n  " + "\n  ".join(stale)


def test_the_list_check_finds_a_missing_an_extra_and_a_doubled_entry():
    page = "<!-- lists: fixtures.subjects.KNOWN_SUBJECTS -->\n- `reference`, `vllm`, `vllm`, `vllm-gone`\n<!-- /lists -->\n"
    problems = list_problems(page)
    assert "fixtures.subjects.KNOWN_SUBJECTS: 'vllm-xpu-sparse' is not listed" in problems
    assert "fixtures.subjects.KNOWN_SUBJECTS: 'vllm-gone' is listed but not in it" in problems
    assert "fixtures.subjects.KNOWN_SUBJECTS: 'vllm' is listed twice" in problems
    table = "<!-- lists: fixtures.subjects.KNOWN_SUBJECTS column 2 -->\n| a | b |\n| --- | --- |\n| `x.py` | `vllm` |\n<!-- /lists -->\n"
    assert "fixtures.subjects.KNOWN_SUBJECTS: 'x' is listed but not in it" not in list_problems(table)
    assert "fixtures.subjects.KNOWN_SUBJECTS: 'reference' is not listed" in list_problems(table)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_a_page_links_exists():
    """A link to ``page.md#anchor`` between the pages names a heading that page has."""
    pages = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    headings = {p.resolve(): {_anchor(h) for h in re.findall(r"^#+ (.*)$", p.read_text(), re.M)} for p in pages}
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", page.read_text()):
            resolved = (page.parent / target).resolve()
            if resolved in headings and anchor not in headings[resolved]:
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, "links to headings that do not exist:\n  " + "\n  ".join(broken)
    assert _anchor("The sparse MLA family") == "the-sparse-mla-family"


# A measured figure: a time or a percentage in prose (code spans, code blocks and generated blocks aside: a
# setting is written as code, a generated table carries its run's commit and date at the top of its page).
FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|µs|min)\b|\b\d+(?:\.\d+)?\s?%")
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b|`[0-9a-f]{7,40}`")


def undated_figures(text: str) -> list[str]:
    """The paragraphs of a page that state a measured figure without saying when: neither the paragraph, nor
    the one before it (a table's or a list's introduction), nor its section's heading names a date or a
    commit."""
    text = re.sub(r"<!-- generated:.*?<!-- /generated -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for section in re.split(r"\n(?=#)", text):
        heading = section.split("\n", 1)[0]
        paragraphs = re.split(r"\n\s*\n", section)
        for before, paragraph in zip(["", *paragraphs], paragraphs, strict=False):
            prose = re.sub(r"`[^`]*`", "", paragraph)
            if FIGURE.search(prose) and not any(DATED.search(t) for t in (paragraph, before, heading)):
                found.append(f"[{heading.strip('# ')}] {' '.join(paragraph.split())[:100]}")
    return found


def test_every_measured_figure_in_the_docs_is_dated_or_generated():
    """A time or a percentage a page states was measured at some commit on some day: it says which (or is
    generated by the last CI run, whose page says it at the top); a figure without either reads as current."""
    pages = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    undated = [f"{p.relative_to(ROOT)}: {why}" for p in pages for why in undated_figures(p.read_text())]
    assert not undated, "figures without a date or a commit:\n  " + "\n  ".join(undated)


def test_the_figure_check_finds_an_undated_time_and_passes_a_dated_one():
    page = "## Runs\n\nThe run took 41 s.\n\nAt `0123abc`, 2026-12-06: 40 s.\n\nThe limit is `60 s`.\n"
    assert undated_figures(page) == ["[Runs] The run took 41 s."]
    assert undated_figures("## Runs (2026-12-06)\n\nIt took 41 s and 3 %.\n") == []
    assert undated_figures("<!-- generated: x -->\nIt took 41 s.\n<!-- /generated -->\n") == []
