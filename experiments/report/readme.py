"""Generated blocks of a hand-written page (README.md's Findings, docs/benchmarks.md): the text
between <!-- tables:NAME --> and <!-- /tables:NAME -->, replaced whole; the rest of the page is kept."""
from __future__ import annotations

from pathlib import Path


def _marks(name: str) -> tuple[str, str]:
    return f"<!-- tables:{name} -->", f"<!-- /tables:{name} -->"


def update_block(page: Path, name: str, body: str) -> bool:
    """Replaces the page's block `name` with body. False (nothing written) when it has no such block."""
    begin, end = _marks(name)
    if not page.is_file():
        return False
    doc = page.read_text()
    if begin not in doc or end not in doc:
        return False
    head, rest = doc.split(begin, 1)
    page.write_text(f"{head}{begin}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}")
    return True


def read_block(page: Path, name: str) -> str:
    """The text of the page's block `name`; '' when it has none."""
    begin, end = _marks(name)
    doc = page.read_text() if page.is_file() else ""
    return doc.split(begin, 1)[1].split(end, 1)[0] if begin in doc and end in doc else ""
