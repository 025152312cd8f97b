"""The pages a clone of the project has: the README is a front page, every relative link and every
README section a page names exists, and no page points at a file outside the project."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# every hand-written or generated text a reader follows: pages, reports, specs and configs, code comments
TEXTS = [*PAGES, *sorted((ROOT / "results").glob("*.md")), *sorted((ROOT / "experiments").rglob("*.yaml")),
         *sorted(p for d in ("experiments", "modules", "datamodules", "benchmarks") for p in (ROOT / d).rglob("*.py")),
         ROOT / "Makefile"]
OUTSIDE = re.compile(r"\.\./shared|(?<![\w./-])shared/(?:notes|seeds)/")
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_SECTION = re.compile(r"README(?:'s|\.md)? \"([^\"]+)\"")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    return {slug(h) for h in re.findall(r"(?m)^#+ (.+)$", text)}


def headings(page: Path) -> set[str]:
    return {h.strip() for h in re.findall(r"(?m)^#+ (.+)$", page.read_text())}


def test_the_readme_is_a_front_page_of_at_most_150_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_no_page_points_at_a_file_outside_the_project():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in TEXTS for n, line in enumerate(p.read_text().splitlines(), 1)
             if OUTSIDE.search(line)]
    assert found == []


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not a file of the project
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_every_readme_section_a_text_names_exists():
    sections = headings(ROOT / "README.md")
    named = [(p.relative_to(ROOT).as_posix(), s) for p in TEXTS for s in README_SECTION.findall(p.read_text())]
    assert [(p, s) for p, s in named if s not in sections] == []


def test_the_checks_see_what_they_look_for(tmp_path):
    """The patterns catch the forms the project once had."""
    assert OUTSIDE.search("The H200 figures in `../shared/notes/gpu-device.md`")
    assert OUTSIDE.search("definitions in shared/notes/references.md")
    assert not OUTSIDE.search("experiments/runs/sweep/shared.py and the shared pool")
    assert README_SECTION.findall('gpu profile: not yet run; README "Data scale" gives the estimate') == ["Data scale"]
    assert slug("Resolution change by position-embedding interpolation (ViT paper Sec. 3.2)") == \
        "resolution-change-by-position-embedding-interpolation-vit-paper-sec-32"
    assert slug("The suite's families: cost against resolution") == "the-suites-families-cost-against-resolution"
