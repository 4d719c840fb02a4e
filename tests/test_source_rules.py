"""Rules the source keeps: code comments state the rule and why, measured evidence lives in the
docs (a comment may name the section), no file is over 600 lines."""
from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "fusebench").rglob("*.py"))
MAX_LINES = 600

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
DEVICE = re.compile(r"\b(H100|H200|A100|B200|MI300)\b")
FIGURE = re.compile(r"\d(\.\d+)?\s*(x\b|%|us\b|µs|ms\b|GB/s|TFLOP)")
POINTER = re.compile(r"docs/(\w+)\.md, '([^']+)'")


def _comments(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring in a file."""
    text = path.read_text(encoding="utf-8")
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def figures_from_runs(text: str) -> bool:
    """Whether a comment quotes a run: a date, or a device named beside a measured figure."""
    return bool(DATE.search(text)) or bool(DEVICE.search(text) and FIGURE.search(text))


def test_the_rule_sees_a_quoted_run():
    assert figures_from_runs("# 1.2x faster on an H100") and figures_from_runs("# measured 2026-11-26")
    assert not figures_from_runs("# the device's name, e.g. H100") and not figures_from_runs("# 4 warps a row")


def test_no_comment_quotes_a_device_run():
    quoting = [f"{p.relative_to(ROOT)}:{line}" for p in SOURCES for line, text in _comments(p)
               for chunk in text.splitlines() if figures_from_runs(chunk)]
    assert not quoting, "comments quoting device runs (move the figures to docs/, point there):\n" + "\n".join(quoting)


def test_every_docs_pointer_names_a_place_in_the_doc():
    missing = []
    for path in SOURCES:
        for match in POINTER.finditer(path.read_text(encoding="utf-8")):
            doc = ROOT / "docs" / f"{match.group(1)}.md"
            name = re.sub(r"\s*\n\s*#?\s*", " ", match.group(2))  # a name wrapped over comment lines
            if not doc.exists() or name not in doc.read_text(encoding="utf-8"):
                missing.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert not missing, "\n".join(missing)


def test_no_source_file_is_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
