"""The README's Findings table: one row per claim of the source papers, each experiment's
`findings(exp_dir)` (experiments/<experiment>/tables.py) giving its rows from its run records.

A row is the question, the published result, ours (a paired difference by seed with its 95%
interval), the verdict in the shared vocabulary (report/verdicts.py; "not read" while a run behind
it was still improving: report/claim.py, whose Claim makes each row) and where it came from: the profile, the hardware, the commit, and whose
runs (yours in results/runs or the committed reference)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from experiments.report.records import LeftOut, left_out_line
from experiments.statistics import Estimate
from experiments.report.table_format import markdown_table, plus_minus, plural
from experiments.report.verdicts import legend
from experiments.runs.run.summary import Summary


@dataclass(frozen=True)
class Finding:
    question: str
    published: str
    ours: str
    verdict: str
    source: str


def estimate_text(est: Estimate | None) -> str:
    """A paired difference as a table writes it: +0.0123 ± 0.0045 (3 pairs)."""
    if est is None:
        return "no pair of finished runs"
    return f"{plus_minus(est.value, est.ci95, signed=True, no_interval='')} ({plural(est.n, 'pair')})"


def source(experiment: str, profile: str, summaries: list[Summary], whose: str) -> str:
    """`datascale` cpu, 2 CPU cores (...), commit abc: where a row's numbers were made."""
    hardware = sorted({s.hardware for s in summaries if s.hardware})
    commits = sorted({s.commit for s in summaries if s.commit})
    return (f"[{experiment}](results/{experiment}.md) {profile}; {'; '.join(hardware) or 'hardware not recorded'}; "
            f"commit {', '.join(commits) or '?'}; {whose}")


def render(findings: list[Finding], left_out: list[LeftOut | str] = ()) -> str:
    """The Findings table, and the runs behind it that could not be read (records.read_runs; or as
    a block words them: kept_findings)."""
    head = ["question", "published", "ours (paired by seed, 95% interval)", "verdict", "from"]
    rows = [[c.replace("|", "/") for c in (f.question, f.published, f.ours, f.verdict, f.source)] for f in findings]
    left = ["", f"- {left_out_line(left_out)}"] if left_out else []
    return "\n".join(["", "", *markdown_table(head, rows, text_columns=len(head)), *left, "", *legend(), ""])


SOURCE = re.compile(r"\[([^\]]+)\]\(results/")  # a row's `from` cell begins with its experiment's report (source)
LEFT_OUT = re.compile(r"; (?=[A-Za-z0-9][\w.-]*/)")  # between two runs of "runs left out: ..." (left_out_line)


def kept_findings(block: str) -> dict[str, tuple[list[Finding], list[str]]]:
    """A rendered Findings block read back: per experiment, its rows and its runs left out (as the
    block words them), so that a rebuild of some experiments keeps the others' as they are."""
    kept: dict[str, tuple[list[Finding], list[str]]] = {}
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith("| question |"):
            row = Finding(*line[2:-2].split(" | "))
            name = SOURCE.match(row.source)
            if name:
                kept.setdefault(name.group(1), ([], []))[0].append(row)
        elif line.startswith("- runs left out: "):
            for run in LEFT_OUT.split(line.removeprefix("- runs left out: ")):
                kept.setdefault(run.split("/", 1)[0], ([], []))[1].append(run)
    return kept
