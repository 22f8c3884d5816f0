"""The docs' cross-references resolve: links, the doc pages named, and the sections and tables named.

A link in the README or docs/ must reach a file (and its #anchor a heading). A doc page named in
the README, docs/, benchmarks/, the package or the tests must exist, and a section or table named
right after it in double quotes (the page, a comma, then the quoted heading; or "the page's table"
and the quoted name) must be text of that page, as must every quoted name in a benchmark's
"Produces ..." paragraph. Example that fails: benchmarks/rpc.py naming, as the page of its tables,
benchmarks.md when they live in rpc.md. Another project's docs (llguidance's, in grammar/tools.py)
are skipped: a path right after a possessive is not ours.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [
    *DOCS,
    *sorted((ROOT / "benchmarks").glob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.sh")),
    *sorted((ROOT / "specdec_cli").rglob("*.py")),
    *sorted((ROOT / "tests").rglob("*.py")),
]
DOC_PATH = re.compile(r"(?<![\w/.-])(?<!'s )docs/([\w.-]+\.md)")
NAMED = re.compile(r"(?<![\w/.-])(?<!'s )docs/([\w.-]+\.md)(?:'s)?,?:? (?:(?:table|section|paragraph) )?\"([^\"\n]+)\"")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading. Example: 'Many clients in one batch' -> 'many-clients-in-one-batch'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def produces_paragraphs(text: str) -> list[str]:
    """Each 'Produces ...' paragraph of a benchmark: that line and the ones after it up to a blank
    line, the docstring's end or, in a shell script, the end of the comment (examples: the test below)."""
    out = []
    for match in re.finditer(r"Produces ", text):
        lines = text[match.start():].split("\n")
        kept = [lines[0]]
        shell = text[text.rfind("\n", 0, match.start()) + 1:match.start()].lstrip().startswith("#")
        for line in lines[1:]:
            if not line.strip() or line.lstrip().startswith('"""') or (shell and not line.lstrip().startswith("#")):
                break
            kept.append(line)
        out.append("\n".join(kept).split('"""')[0])
    return out


def test_produces_paragraphs_example():
    assert produces_paragraphs("# Produces X.\n# more\nset -e") == ["Produces X.\n# more"]
    assert produces_paragraphs('Produces Y.\nmore.\n"""\nimport x') == ["Produces Y.\nmore."]


def test_slug_example():
    assert slug("`-k auto` against the best fixed k") == "-k-auto-against-the-best-fixed-k"


def test_links_in_readme_and_docs_resolve():
    broken = []
    for page in DOCS:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and anchor not in {slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)}:
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_doc_page_named_exists():
    missing = sorted(
        f"{source.relative_to(ROOT)}: docs/{name}"
        for source in SOURCES
        for name in DOC_PATH.findall(source.read_text(encoding="utf-8"))
        if not (ROOT / "docs" / name).exists()
    )
    assert not missing, "\n".join(missing)


def test_every_section_or_table_named_is_in_its_page():
    missing = []
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        named = NAMED.findall(text)
        for paragraph in produces_paragraphs(text) if source.parent.name == "benchmarks" else []:
            parts = re.split(r"docs/([\w.-]+\.md)", paragraph)  # [before, page, after, page, after, ...]
            named += [(page, quoted) for page, after in zip(parts[1::2], parts[2::2]) for quoted in re.findall(r"\"([^\"\n]+)\"", after)]
        for page, quoted in named:
            file = ROOT / "docs" / page
            if file.exists() and quoted not in file.read_text(encoding="utf-8"):
                missing.append(f"{source.relative_to(ROOT)}: docs/{page} has no \"{quoted}\"")
    assert not missing, "\n".join(sorted(set(missing)))
