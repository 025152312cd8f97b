"""A claim of the source papers as data: its fixed words from experiments/<experiment>/claims.yaml
(Wording: the question, the published result and where it is published, the words for each
direction, the kind of quantity whose margin reads it), and our estimate of it from the run records
(Claim: a paired difference with its 95% interval, and the runs behind it).

One Claim renders each place a claim is read: the README's Findings row (`row`, `cell`), the verdict
of a reading's bullet or a figure (`read`; with what follows from it, `reasoned`; against a published
effect, `against_published`), and the sentences that stand in for them while a run behind it was
still improving (`not_read`, `not_read_clause`, `not_read_at`, `silence`). Every one of them goes
through the shared vocabulary (report/verdicts.py) and the one converged-or-silent check
(`converged`); `said` is the bare verdict, for a caller that has checked it. Several claims of one
wording read at once (a figure's verdict over every pair it compares) go through `read_together`.

claims.yaml is read with yaml.safe_load: data only, nothing in it runs.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import yaml

from experiments.report.findings import Finding, estimate_text
from experiments.statistics import Estimate
from experiments.runs.sweep.spec import spec_path
from experiments.report.verdicts import (MARGINS, STILL_IMPROVING, category, not_read, side, size_against,
                                         verdict, were_improving)
from modules.files import parse_yaml

CLAIMS_FILE = "claims.yaml"
AS_PUBLISHED = ", as published"  # after a direction the paper found, in the Findings
PUBLISHED = "published"  # claims.yaml's keys that are no claim: the papers' numbers the reports quote,
FIGURES = "figures"      # and each figure's caption, what it measures and what the literature found
TOGETHER = ("agree", "disagree", "unsure")  # a wording's `together` words, one per reading of several claims


@dataclass(frozen=True)
class Wording:
    """A claim's fixed words: the Findings row's question and published cell, the words of each
    direction of our estimate (`higher`: the interval lies above 0; `expected`, the one the paper
    found, which the Findings row says is "as published"; a reading may add `same` after
    "no difference", `unsure` after "cannot tell" and `apart` after a direction, and say the claim as a sentence, `said`, its
    {names} filled by `filled`), and the kind of quantity (verdicts.MARGINS) whose margin reads it;
    `size`, the published difference (or one per published model) where the paper gives one, and
    `source`, where the paper says it; `together`, what several claims of this wording say read at
    once (read_together), where a figure reads them so."""
    question: str
    published: str
    higher: str
    lower: str
    expected: str = ""
    same: str = ""
    unsure: str = ""
    apart: str = ""
    said: str = ""
    margin: str = "accuracy"
    size: float | tuple[float, ...] | None = None
    source: str = ""
    together: dict | None = None

    @property
    def margin_value(self) -> float:
        return MARGINS[self.margin].value

    def filled(self, **names: str) -> "Wording":
        """The wording with the {names} of its question, its sentence (`said`) and its directions
        filled: the runs a reading compares."""
        return replace(self, question=self.question.format(**names), said=self.said.format(**names),
                       higher=self.higher.format(**names), lower=self.lower.format(**names))


@dataclass(frozen=True)
class Claim:
    """Our reading of one claim: its estimate (a paired difference; None where no pair ran) and the
    runs behind it (`improving` of them still improving at their last validation, `unknown` of those
    by too few validations to tell)."""
    wording: Wording
    estimate: Estimate | None
    runs: int
    improving: int = 0
    unknown: int = 0

    @property
    def converged(self) -> bool:
        """Converged or silent: a claim is read only when every run behind it plateaued."""
        return not self.improving

    @property
    def category(self) -> str | None:
        """The rule's word ("no difference", "higher", "lower", "cannot tell"); None while not converged."""
        return category(self.estimate, self.wording.margin_value) if self.converged else None

    def said(self, higher: str | None = None, lower: str | None = None) -> str:
        """The verdict with its interval and margin, in the claim's words for a direction (or a
        reading's own)."""
        return verdict(self.estimate, higher or self.wording.higher, lower or self.wording.lower,
                       self.wording.margin_value)

    def read(self) -> str:
        """The verdict in the claim's words where converged, else the clause saying why it is not read."""
        return self.said() if self.converged else self.not_read_clause()

    def reasoned(self) -> str:
        """The verdict and what follows from it in the wording's words for its category (": same" after
        "no difference", ": unsure" after "cannot tell", ", apart" after a direction); the not-read
        clause while a run behind it still improved."""
        if not self.converged:
            return self.not_read_clause()
        then = {"no difference": f": {self.wording.same}", "cannot tell": f": {self.wording.unsure}"}
        return self.said() + then.get(self.category, f", {self.wording.apart}")

    def not_read(self) -> str | None:
        """The sentence a reading says instead of the verdict while a run behind it still improved."""
        return not_read(self.improving, self.runs, self.unknown)

    def not_read_clause(self) -> str:
        """The same, as the clause of a bullet that names its comparison."""
        return (f"not read: {self.improving} of the {self.runs} runs behind it {were_improving(self.unknown)} "
                f"({STILL_IMPROVING})")

    def not_read_at(self, where: str) -> str | None:
        """The not-read sentence of a reading made at `where` (its sizes), counting the runs there
        (None when converged)."""
        if self.converged:
            return None
        return f"Not read at {where}: {self.improving} of the runs there {were_improving(self.unknown)} ({STILL_IMPROVING})."

    def silence(self) -> str | None:
        """A bullet's short form of the not-read clause (None when converged)."""
        if self.converged:
            return None
        return f"not read, {self.improving} of the {self.runs} runs behind it still improving ({STILL_IMPROVING})"

    def cell(self) -> str:
        """The Findings row's verdict: "not read" while not converged; else the verdict, and where a
        published size exists, its direction and then, apart, its size against the published one."""
        if not self.converged:
            return f"not read: {self.improving} of {self.runs} runs still improving ({STILL_IMPROVING})"
        words = {d: getattr(self.wording, d) + (AS_PUBLISHED if d == self.wording.expected else "")
                 for d in ("higher", "lower")}
        said = self.said(**words)
        if self.wording.size is None:
            return said
        return f"in direction: {said}; {size_against(self.estimate, self.wording.size)}"

    def against_published(self) -> str:
        """Ours against the published effect (`size`, one per published model), in direction and in
        size apart. Direction in the shared vocabulary: a published "no difference" (every effect 0) is
        agreed with only when our whole interval lies inside the margin; an effect the paper finds is
        contradicted by our "no difference" as by the opposite direction. The not-read clause while a
        run behind it still improved."""
        est = self.estimate
        if not self.converged:
            return self.not_read_clause()
        if est is None:
            return "no pair"
        if est.ci95 is None:
            return "one pair, no interval"
        published = self.wording.size if isinstance(self.wording.size, tuple) else (self.wording.size,)
        said = self.category
        if set(published) == {0}:
            agrees = "agree" if said == "no difference" else "cannot tell" if said == "cannot tell" else "disagree"
            return f"in direction: {agrees}, ours {self.said()}"
        sign = 1 if min(published) > 0 else -1 if max(published) < 0 else None
        agrees = ("cannot tell" if said == "cannot tell" or sign is None else
                  "agree" if said != "no difference" and side(est) == sign else "disagree")
        return f"in direction: {agrees}, ours {self.said()}; {size_against(est, published)}"

    @property
    def agrees(self) -> bool | None:
        """Whether our direction is the one the paper found (None while not converged or not expected)."""
        if not self.converged or not self.wording.expected:
            return None
        return self.category == self.wording.expected

    def row(self, ours: str, source: str) -> Finding:
        """The README's Findings row: `ours` names what was estimated (its estimate follows, marked
        while a run behind it still improved)."""
        return Finding(self.wording.question, self.wording.published,
                       f"{ours}: {estimate_text(self.estimate)}{self.dagger()}", self.cell(), source)

    def dagger(self) -> str:
        """" †" after a shown estimate while a run behind it still improved, else ""."""
        return f" {STILL_IMPROVING}" if self.estimate is not None and not self.converged else ""


def read_together(claims: list[Claim]) -> str:
    """The direction of several claims of one wording read at once (a figure's verdict over every
    transformer − CNN pair): "agrees" when every one reads the direction the paper found, "disagrees"
    when every one reads the other or "no difference", else "cannot tell" with how many of their 95%
    intervals include 0 (the vocabulary says every "cannot tell" with its interval: verdicts.misread),
    each followed by the wording's `together` words for it. Silent ('') unless every claim is converged."""
    if not claims or not all(c.converged for c in claims):
        return ""
    wording = claims[0].wording
    said = [c.category for c in claims]
    other = "lower" if wording.expected == "higher" else "higher"
    if all(s == wording.expected for s in said):
        return f"agrees in direction: {wording.together['agree']}"
    if all(s in (other, "no difference") for s in said):
        return f"disagrees in direction: {wording.together['disagree']}"
    return f"in direction, {cannot_tell_together(claims)}; {wording.together['unsure']}"


def cannot_tell_together(claims: list[Claim]) -> str:
    """"cannot tell" over several claims read at once, with what their intervals show, as the
    vocabulary says every "cannot tell" (verdicts.misread): how many 95% intervals include 0, how
    many differences rest on one seed (no interval), else that the intervals read different ways."""
    n = len(claims)
    open_ = sum(c.category == "cannot tell" and c.estimate is not None and c.estimate.ci95 is not None for c in claims)
    one = sum(c.estimate is None or c.estimate.ci95 is None for c in claims)

    def of(k: int) -> str:
        return "the one difference" if n == 1 else f"each of the {n} differences" if k == n else f"{k} of the {n} differences"
    if open_:
        return (f"cannot tell: the 95% interval of {of(open_)} includes 0"
                + (f", and {one} more {'rests' if one == 1 else 'rest'} on one seed (no interval)" if one else ""))
    if one:
        return f"cannot tell: one seed, no interval, for {of(one)}"
    return (f"cannot tell: the 95% intervals of the {n} differences read different ways "
            f"({', '.join(sorted({c.category for c in claims}))})")
@dataclass(frozen=True)
class FigureText:
    """A figure's fixed words: its caption, what it measures and what the literature found."""
    caption: str
    measures: str
    published: str


def load_figures(experiment: str, path: Path | None = None) -> dict[str, FigureText]:
    """The figures claims.yaml describes under `figures`, as {figure name: FigureText}."""
    path = path or claims_path(experiment)
    out = {}
    for name, entry in (_read(path).get(FIGURES) or {}).items():
        if not isinstance(entry, dict) or set(entry) != {f.name for f in fields(FigureText)} \
                or not all(isinstance(v, str) for v in entry.values()):
            raise ValueError(f"claims {path.as_posix()!r}, figure {name!r}: expected the texts "
                             f"{', '.join(f.name for f in fields(FigureText))}")
        out[name] = FigureText(**entry)
    return out


def load_claims(experiment: str, path: Path | None = None) -> dict[str, Wording]:
    """The claims.yaml beside experiment's spec as {claim name: Wording}; one line naming the file and
    the key where it is not what a claim holds."""
    path = path or claims_path(experiment)
    return {name: _wording(path, name, entry) for name, entry in _read(path).items() if name not in (PUBLISHED, FIGURES)}


def load_published(experiment: str, path: Path | None = None) -> dict:
    """The published numbers claims.yaml holds under `published` (a paper's tables, as data)."""
    return _read(path or claims_path(experiment)).get(PUBLISHED) or {}


def claims_path(experiment: str) -> Path:
    return spec_path(experiment).parent / CLAIMS_FILE


def _read(path: Path) -> dict:
    try:
        data = parse_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"claims {path.as_posix()!r} are not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"claims {path.as_posix()!r}: expected a mapping of claim names to claims")
    return data


def _wording(path: Path, name: str, entry) -> Wording:
    allowed = [f.name for f in fields(Wording)]
    where = f"claims {path.as_posix()!r}, claim {name!r}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping with keys {', '.join(allowed)}")
    unknown = sorted(set(entry) - set(allowed))
    missing = [k for k in allowed[:4] if not isinstance(entry.get(k), str)]
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(
            ([f"unknown key {', '.join(unknown)}"] if unknown else []) + ([f"missing text {', '.join(missing)}"]
                                                                         if missing else []))
            + f" (allowed: {', '.join(allowed)})")
    if entry.get("expected", "higher") not in ("higher", "lower"):
        raise ValueError(f"{where}: expected {entry['expected']!r} is no direction (allowed: higher, lower)")
    if entry.get("margin", "accuracy") not in MARGINS:
        raise ValueError(f"{where}: margin {entry['margin']!r} is no declared margin (allowed: {', '.join(MARGINS)})")
    together = entry.get("together")
    if together is not None and (not isinstance(together, dict) or set(together) != set(TOGETHER)
                                 or not all(isinstance(v, str) for v in together.values())):
        raise ValueError(f"{where}: together: expected the texts {', '.join(TOGETHER)}")
    size = entry.get("size")
    return Wording(**{**entry, "size": tuple(size) if isinstance(size, list) else size})
