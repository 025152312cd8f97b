"""When a run has converged: the plateau rule every run is judged by.

A run plateaued when the best validation accuracy of its last quarter of steps beats the best one
before it by less than one point. One point is about one standard error of accuracy on 1,000
validation images near 85% (sqrt(0.85 * 0.15 / 1000) = 1.1 points): a smaller gain cannot be told
from noise, so training longer would not be seen to help. A cosine schedule still gains a little
in its tail; the rule asks whether that gain is worth more steps.
"""
from __future__ import annotations

TAIL = 0.25        # the share of steps at the end of a run that is checked
TOLERANCE = 0.01   # validation accuracy gained in that tail that still counts as a plateau


def plateau(history: list[tuple[int, float]], max_steps: int, tail: float = TAIL,
            tolerance: float = TOLERANCE) -> dict | None:
    """{plateaued, best_step, tail_gain} for validations [(step, val_acc), ...] of a run of
    max_steps steps; None without at least one validation before and one inside the tail."""
    cut = max_steps * (1 - tail)
    before = [a for s, a in history if s <= cut]
    after = [a for s, a in history if s > cut]
    if not before or not after:
        return None
    best_step, _ = max(history, key=lambda sa: sa[1])  # the first step reaching the best
    gain = max(after) - max(before)
    return {"plateaued": gain < tolerance, "best_step": int(best_step), "tail_gain": round(float(gain), 4),
            "tail": tail, "tolerance": tolerance}


def still_improving(summary: dict) -> bool:
    """A finished run whose numbers are shown with a dagger and not read: still improving by
    `plateau`, or with too few validations for the rule to tell (its plateau None): a number is
    read only from a run known to have plateaued. A run stopped on purpose at a target accuracy
    (fit --stop_at_val_acc; its summary says 'stopped') is judged by that target instead."""
    p = summary.get("plateau")
    return p.get("plateaued") is False if isinstance(p, dict) else plateau_unknown(summary)


def plateau_unknown(summary: dict) -> bool:
    """Too few validations for the plateau rule (or a record from before it), and not stopped at a target."""
    return not isinstance(summary.get("plateau"), dict) and not summary.get("stopped")
