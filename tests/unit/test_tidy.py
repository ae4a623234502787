"""The repository's own text stays true: what it cites exists, its relative links resolve,
functions stay short, the package list of docs/architecture.md §10 matches the tree. Pure and
fast: it reads files, never imports the product.

What counts as a citation (in every .py and .md file of the repository, except dot-directories,
run results and generated protobuf code):
- a backticked repository path: `raftsched/state/fsm.py`, `tests/support/`, `docs/x.md`
  (a first component that is a top-level directory of the repository; a `:line` or `::test` tail
  is ignored; globs, `<placeholders>` and `...` are skipped), and such a path to a .py or .md
  file anywhere (`tests/support/fsmkit.py`, `docs/architecture.md §3`);
- a dotted module name `raftsched.x.y` anywhere, and `agent.x` / `tests.x` inside backticks:
  each component must be a package or module until a module is reached (what follows it is an
  attribute); a name after a package that is not a submodule must appear in its `__init__.py`;
- `DESIGN.md`: the design is not in the repository; cite `docs/architecture.md` instead. A path
  under one of EXTERNAL (outside the repository on purpose) is allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("raftsched", "agent", "tests", "scripts", "jepsen-style", "docs", "proto", "deploy",
            "examples")
EXTERNAL = ("/work/shared/", "../shared/")
MAX_FUNCTION_LINES = 70

# Product functions over MAX_FUNCTION_LINES today (lines from `def` to the end), being split by
# other work: the list may only shrink. A new long function fails, so does one that grew past its
# recorded length, and so does a stale entry.
LONG_FUNCTIONS: dict[str, int] = {}

_BACKTICKED = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?:\./)?((?:" + "|".join(map(re.escape, TOP_DIRS)) + r")/[\w./-]*)")
_DOTTED_ANY = re.compile(r"(?<![\w./\"'=-])(raftsched(?:\.[a-z_][a-z0-9_]*)+)")
# Dotted names that are not Python modules: the protobuf package, file names.
NOT_MODULES = ("raftsched.v1",)
FILE_SUFFIXES = ("py", "md", "proto", "toml", "bash", "json", "yaml", "txt")
_DOTTED_TICKED = re.compile(r"^((?:agent|tests)(?:\.[a-z_][a-z0-9_]*)+)")
_TOP = "(?:" + "|".join(map(re.escape, TOP_DIRS)) + ")"
_FILE = re.compile(r"(?<![\w/.-])(" + _TOP + r"/[\w/.-]*\w\.(?:py|md))\b")
_DESIGN = re.compile(r"(\S*)DESIGN\.md")


def text_files() -> list[Path]:
    """The repository's .py and .md files (not generated code, nor what runs leave behind)."""
    skip = {"node_modules", "__pycache__", "results"}
    files = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.suffix in (".py", ".md") and not skip.intersection(parts) \
                and not any(part.startswith(".") for part in parts):
            if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
                continue
            files.append(path)
    return sorted(files)


def path_problem(cited: str) -> str | None:
    cited = re.split(r"::|:(?=\d)", cited)[0].rstrip(".,;")
    if any(ch in cited for ch in "*?{<") or "..." in cited:
        return None
    return None if (ROOT / cited).exists() else f"path `{cited}` does not exist"


def in_package_init(package: Path, name: str) -> bool:
    init = package / "__init__.py"
    return init.exists() and re.search(rf"\b{re.escape(name)}\b", init.read_text()) is not None


def module_problem(dotted: str) -> str | None:
    parts = dotted.split(".")
    if dotted.startswith(NOT_MODULES) or parts[-1] in FILE_SUFFIXES or "__" in dotted:
        return None
    here = ROOT / parts[0]
    for i, name in enumerate(parts[1:], start=1):
        if (here / name / "__init__.py").exists():
            here = here / name
        elif (here / f"{name}.py").exists() or in_package_init(here, name):
            return None
        else:
            return f"module `{'.'.join(parts[:i + 1])}` does not exist"
    return None


def citation_problems(text: str) -> list[str]:
    problems = []
    for ticked in _BACKTICKED.findall(text):
        for token in ticked.split():
            if "<" in token or "*" in token:  # a placeholder or a glob names no one file
                continue
            if (m := _PATH.match(token)) and (p := path_problem(m.group(1))):
                problems.append(p)
            if (m := _DOTTED_TICKED.match(token)) and (p := module_problem(m.group(1))):
                problems.append(p)
    for dotted in _DOTTED_ANY.findall(text):
        if p := module_problem(dotted):
            problems.append(p)
    for cited in _FILE.findall(text):
        if p := path_problem(cited):
            problems.append(p)
    for prefix in _DESIGN.findall(text):
        if not prefix.lstrip("`(").startswith(EXTERNAL):
            problems.append("cites DESIGN.md, which is not in the repository "
                            "(cite docs/architecture.md)")
    return problems


def test_every_cited_path_and_module_exists() -> None:
    problems = []
    for path in text_files():
        if path == Path(__file__).resolve():
            continue
        for problem in citation_problems(path.read_text(encoding="utf-8")):
            problems.append(f"{path.relative_to(ROOT)}: {problem}")
    assert not problems, "\n".join(sorted(set(problems)))


def function_lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                lengths[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(tree, module)
    return lengths


def product_function_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}
    for package in ("raftsched", "agent"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_pb2" not in path.name:
                lengths.update(function_lengths(path))
    return lengths


def test_no_new_product_function_over_the_line_limit() -> None:
    lengths = product_function_lengths()
    long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    new = {name: n for name, n in long.items() if name not in LONG_FUNCTIONS}
    assert not new, (f"product functions over {MAX_FUNCTION_LINES} lines (def to end): "
                     f"{sorted(new.items())}; split them")
    grown = {name: n for name, n in long.items() if n > LONG_FUNCTIONS.get(name, n)}
    assert not grown, f"allow-listed long functions grew (now, was): " \
                      f"{[(name, n, LONG_FUNCTIONS[name]) for name, n in sorted(grown.items())]}"
    stale = sorted(name for name in LONG_FUNCTIONS if name not in long)
    assert not stale, f"no longer over {MAX_FUNCTION_LINES} lines (or gone): drop from " \
                      f"LONG_FUNCTIONS: {stale}"


LAYER_DOC = "docs/architecture.md"
"""Where the package picture lives (§10): `raftsched/cli/` first, then one line per package."""


def layer_block() -> dict[str, str]:
    """The package picture of LAYER_DOC: `name/` (or `shared leaves`) -> its text."""
    text = (ROOT / LAYER_DOC).read_text(encoding="utf-8")
    start = text.index("```\nraftsched/cli/")
    block = text[start + 4:text.index("```", start + 4)]
    entries: dict[str, str] = {}
    key = ""
    for line in block.splitlines():
        head = line[:22].strip()
        if head and not head.startswith("|"):
            key = head.split("|")[0].strip()
            entries[key] = line[22:]
        elif key:
            entries[key] += " " + line[22:]
    return entries


def listed_names(text: str) -> set[str]:
    """Names of a comma list, dropping parenthesised remarks."""
    depth, plain = 0, []
    for ch in text:
        depth += ch == "("
        if depth == 0:
            plain.append(ch)
        depth -= ch == ")"
    return {word.split()[-1] for word in "".join(plain).replace(":", ",").split(",")
            if word.split()}


def test_package_list_matches_the_tree() -> None:
    entries = layer_block()
    packages = {p.name for p in (ROOT / "raftsched").iterdir() if (p / "__init__.py").exists()}
    leaves = {p.stem for p in (ROOT / "raftsched").glob("*.py")} - {"__init__", "__main__"}
    shown = {key.removeprefix("raftsched/").rstrip("/") for key in entries}
    assert "agent/" in "".join(entries) or "agent/" in entries, f"agent/ missing from {LAYER_DOC}"
    named = listed_names(entries["shared leaves"])
    missing = (packages - shown - named - {"replica"}) | (leaves - named)
    assert not missing, f"{LAYER_DOC}'s package list lacks {sorted(missing)}"
    absent = named - leaves - packages
    assert not absent, f"{LAYER_DOC} lists absent {sorted(absent)}"
    state = {p.stem for p in (ROOT / "raftsched/state").glob("*.py")} - {"__init__"}
    listed_state = listed_names(entries["raftsched/state/"].replace("pure", ""))
    assert listed_state == state, (f"{LAYER_DOC}'s state modules: missing "
                                   f"{sorted(state - listed_state)}, absent "
                                   f"{sorted(listed_state - state)}")


_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
_FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def prose(path: Path) -> str:
    """A Markdown file without its fenced code blocks (a `# comment` there is no heading)."""
    return _FENCED.sub("", path.read_text(encoding="utf-8"))


def link_problems(path: Path) -> list[str]:
    """Relative links of a Markdown file (`](x.md)`, `](../deploy/)`, `](x.md#part)`) whose
    target does not exist, or whose #anchor names no heading of a Markdown target."""
    problems = []
    for target in _LINK.findall(prose(path)):
        if re.match(r"^[a-z]+:", target) or target.startswith("/"):
            continue  # http:, https:, mailto: and absolute paths are not the repository's
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"link ({target}) names {file_part}, which does not exist")
        elif fragment and resolved.suffix == ".md":
            anchors = {anchor(h) for h in _HEADING.findall(prose(resolved))}
            if fragment not in anchors:
                where = file_part or path.name
                problems.append(f"link ({target}): no heading #{fragment} in {where}")
    return problems


def link_checked_files() -> list[Path]:
    """Every Markdown file of the repository (README.md, docs/, deploy/, jepsen-style/, ...)."""
    return [path for path in text_files() if path.suffix == ".md"]


def test_relative_links_in_the_readme_and_docs_resolve() -> None:
    problems = [f"{path.relative_to(ROOT)}: {problem}"
                for path in link_checked_files() for problem in link_problems(path)]
    assert not problems, "\n".join(problems)
