"""Numbers into table cells, markdown tables and CSV files: the format every experiment's tables share."""
from __future__ import annotations

import csv
import io
import unicodedata
from pathlib import Path
from typing import Callable, Iterable

from modules.files import write_atomic

# what would make a record's text markup: a cell's end, an escape, a tag or entity, a code span, a link
_MARKUP = str.maketrans({"|": "&#124;", "\\": "&#92;", "<": "&lt;", "&": "&amp;", "`": "&#96;", "[": "&#91;",
                         "]": "&#93;"})


def one_line(text: str) -> str:
    """`text` with its line breaks and other control or format characters as spaces: a new line in
    a record would start a heading, a list or a paragraph of its own, or end a table."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)


def plain(text: str) -> str:
    """A record's text as markdown shows it, never as markup: on one line, with every character that
    could end a table cell, start HTML or a link, or escape the next one written as an entity (which
    a markdown table cell, a paragraph and HTML all show as the character). Entities, not
    backslashes: a plain text inside a repr() or a JSON dump stays plain."""
    return one_line(text).translate(_MARKUP)


def fmt(v) -> str:
    """A setting as a table writes it: a float in its shortest form (0.001, 3e-05), anything else as str."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def count(v, missing: str = "") -> str:
    """An integer with thousands separators (12,900); `missing` for None."""
    return f"{v:,}" if isinstance(v, int) else missing if v is None else str(v)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def plus_minus(value: float, ci: float | None, signed: bool = False, digits: int = 4,
               no_interval: str = " ± n/a") -> str:
    """value ± the half-width of its 95% interval; `no_interval` where there is none (one seed)."""
    v = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return v + (f" ± {ci:.{digits}f}" if ci is not None else no_interval)


def markdown_table(head: list[str], rows: list[list[str]], text_columns: int = 1) -> list[str]:
    """A markdown table: the first `text_columns` columns left-aligned, the numbers right-aligned."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * text_columns + "---:|" * (len(head) - text_columns),
            *("| " + " | ".join(r) + " |" for r in rows)]


def replaced_rows(old: list[str], new: list[str], rebuilt: Callable[[str], bool]) -> list[str]:
    """A table's rows after some were rebuilt: the old rows `rebuilt` does not claim, as they were,
    and the new rows where the first claimed one stood (at the end where none was)."""
    kept = [r for r in old if not rebuilt(r)]
    first = next((i for i, r in enumerate(old) if rebuilt(r)), len(old))
    at = sum(1 for r in old[:first] if not rebuilt(r))
    return kept[:at] + new + kept[at:]


def inert(value):
    """A CSV cell a spreadsheet shows as text: a text starting like a formula (=, +, -, @, a tab or a
    carriage return) gets a leading apostrophe, so that a name from a record (a family, a dataset, a
    setting) cannot run as a formula when the file is opened (=HYPERLINK(...), -2+3+cmd|...). A
    number, written as one or as its text (-0.0123, 1e-05), and the lone "-" of an empty cell stay
    as they are."""
    if not isinstance(value, str) or value[:1] not in ("=", "+", "-", "@", "\t", "\r") or value == "-":
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def write_csv(path: Path, rows: Iterable[dict], columns: Iterable[str], cell: Callable | None = None) -> None:
    """One row per dict, in `columns` (other keys left out; None and missing keys written empty),
    each value through `cell` when given and then `inert`; "\\n" line ends whatever the platform, so
    regenerated files compare byte for byte."""
    columns = list(columns)
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writerow({k: inert(k) for k in columns})
    w.writerows({k: inert(r.get(k) if cell is None else cell(r.get(k))) for k in columns} for r in rows)
    write_atomic(path, text.getvalue())  # a link planted at `path` is replaced, never written through
