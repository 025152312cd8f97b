"""Generated blocks of a hand-written page (README.md's Findings, docs/benchmarks.md): the text
between <!-- tables:NAME --> and <!-- /tables:NAME -->, replaced whole; the rest of the page is kept."""
from __future__ import annotations

from pathlib import Path


def update_block(page: Path, name: str, body: str) -> bool:
    """Replaces the page's block `name` with body. False (nothing written) when it has no such block."""
    begin, end = f"<!-- tables:{name} -->", f"<!-- /tables:{name} -->"
    if not page.is_file():
        return False
    doc = page.read_text()
    if begin not in doc or end not in doc:
        return False
    head, rest = doc.split(begin, 1)
    page.write_text(f"{head}{begin}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}")
    return True
