"""The README's generated blocks: text between <!-- tables:NAME --> and <!-- /tables:NAME -->."""
from __future__ import annotations

import re
from pathlib import Path


def update_readme_block(readme: Path, name: str, text: str, out_dir: Path) -> bool:
    """Replaces the README's generated block for `name` (title dropped, plot links made relative
    to the README). False when the README has no such block."""
    begin, end = f"<!-- tables:{name} -->", f"<!-- /tables:{name} -->"
    if not readme.is_file():
        return False
    doc = readme.read_text()
    if begin not in doc or end not in doc:
        return False
    # the tables link their plots relative to out_dir (no folder in the link)
    body = re.sub(r"\]\(([\w.-]+\.png)\)", lambda m: f"]({out_dir.as_posix()}/{m[1]})", text.split("\n", 2)[2])
    head, rest = doc.split(begin, 1)
    readme.write_text(f"{head}{begin}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}")
    return True
