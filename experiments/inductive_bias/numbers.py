"""exp-inductive-bias's numbers: inductive_bias.json and what it lists read into profiles, the
ablation and family rows (accuracy, paired differences to `learn`, probe metrics), robustness
pairs, locality, and the claims the reading, the figures and the Findings read (Claims: the
position embedding, locality). No sentence is made here (words.py)."""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from modules.budgets import kind_of, reading_order
from modules.probes.robustness import FILL

from experiments.report.claim import Claim, load_claims, load_published
from experiments.report.records import read_record, read_runs
from experiments.statistics import Estimate, mean_ci, paired_difference
from experiments.runs.run.convergence import still_improving
from experiments.runs.run.summary import Summary
from experiments.runs.sweep.reference import NothingFinished
from experiments.runs.sweep.shared import located

CLAIMS = load_claims("inductive_bias")  # the claims' fixed words (claims.yaml)
TABLE8 = load_published("inductive_bias")  # ViT Table 8 and Lu et al. 2022 (claims.yaml: published)
NAME = "inductive_bias"

RECORD = "inductive_bias.json"
CKA_DIR = "cka"  # the experiment's CKA records: <exp_dir>/cka/<run>__<reference run>.json

PROBES = "probes.json"

HINT = ": delete it and run make exp-inductive-bias again"

BASELINE = "learn"

REFERENCE = "resnet"

TABLES = ("learn", "learn2d", "sincos")            # variants with a position table

VERSIONS = ("python", "torch", "timm", "lightning")

DROP_AT = 0.5                                      # the PatchDrop fraction the tables quote (Naseer et al.)

FIGURES = ("ablation", "attention_distance", "pos_embed_similarity", "occlusion", "shuffle", "shift", "cka",
           "attention_maps")

COLUMNS = ("profile", "budget", "table", "name", "fraction", "train_size", "val_size", "seeds", "lr", "steps",
           "test_acc_mean", "test_acc_ci95", "delta_vs_learn", "delta_vs_learn_ci95", "still_improving",
           "pos_grid_correlation_mean", "pos_grid_correlation_ci95", "pos_two_d_seeds", "clean_acc_mean",
           f"patchdrop_{DROP_AT:g}_mean", f"patchdrop_{DROP_AT:g}_ci95", "shuffle_grid4_mean", "shuffle_grid4_ci95",
           "shift_patch_acc_mean", "shift_consistency_mean", "shift_consistency_ci95",
           "attention_distance_first_mean", "attention_distance_last_mean", "attention_distance_growth_mean",
           "attention_distance_growth_ci95", "cka_last_vs_resnet_last")

def _test_acc(s: Summary | None):
    return s.test_acc if s is not None and s.status == "done" else None



def _est(values) -> Estimate | None:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return mean_ci(values) if values else None


@dataclass
class Profile:
    """One profile's records at one budget (a profile with several budgets gives one Profile each)."""
    name: str
    rec: dict                                     # the profile's entry, its runs and choices of this budget only
    exp_dir: Path
    budget: str | None = None
    several: bool = False                         # whether the profile has other budgets too
    runs: dict = field(default_factory=dict)      # folder -> its Summary, its identity that of identity.json
    probes: dict = field(default_factory=dict)    # folder -> probes.json
    cka: list = field(default_factory=list)

    @property
    def axes(self) -> dict:
        return self.rec.get("axes") or {}

    @property
    def label(self) -> str:
        return f"{self.name}, budget {self.budget}" if self.several else self.name

    @property
    def key(self) -> str:
        return f"{self.name}_{self.budget}" if self.several else self.name

    def entries(self, table: str) -> list[dict]:
        return self.rec.get(table) or []

    def size(self, fraction: float, key: str = "train_size"):
        vals = {getattr(self.runs[e["run"]], key) for t in ("families", "ablations") for e in self.entries(t)
                if e["fraction"] == fraction and e["run"] in self.runs}
        vals.discard(None)
        return vals.pop() if len(vals) == 1 else None

    def cell(self, table: str, key: str, name: str, fraction: float) -> dict[int, Summary]:
        """seed -> summary of the finished runs of one row (a variant or a family) at a fraction."""
        return {e["seed"]: self.runs[e["run"]] for e in self.entries(table)
                if e[key] == name and e["fraction"] == fraction and _test_acc(self.runs.get(e["run"])) is not None}

    def probe_cell(self, family: str, fraction: float) -> dict[int, dict]:
        return {e["seed"]: self.probes[e["run"]] for e in self.entries("families")
                if e["family"] == family and e["fraction"] == fraction and e["run"] in self.probes}

    def ablation_probes(self, variant: str, fraction: float) -> dict[int, dict]:
        return {e["seed"]: self.probes[e["run"]] for e in self.entries("ablations")
                if e["variant"] == variant and e["fraction"] == fraction and e["run"] in self.probes}

    def families(self) -> list[str]:
        present = {e["family"] for e in self.entries("families")}
        return [f for f in reading_order() if f in present]

    def variants(self) -> list[str]:
        return list(dict.fromkeys(e["variant"] for e in self.entries("ablations")))

    def fractions(self, table: str) -> list[float]:
        return sorted({e["fraction"] for e in self.entries(table)})


def _budget_of(entry: dict, axes: dict):
    return entry.get("budget", axes.get("budget") or (axes.get("budgets") or [None])[0])


def load_profiles(name: str, rec: dict, exp_dir: Path) -> list[Profile]:
    """The profile's record split by budget, each with its runs' summaries, probes and CKA records."""
    axes = rec.get("axes") or {}
    for table in ("families", "ablations"):
        for e in rec.get(table) or []:
            if not isinstance(e, dict) or not {"run", "fraction", "seed"} <= set(e):
                raise ValueError(f"{exp_dir / RECORD}: profile {name!r} has a malformed {table} entry {e!r}{HINT}")
    budgets = list(dict.fromkeys(_budget_of(e, axes) for t in ("families", "ablations") for e in rec.get(t) or []))
    for budget in budgets:  # a budget's name makes paths too (tensorboard/<profile>_<budget>, its figures)
        if budget is not None and (not isinstance(budget, str) or not _NAME.fullmatch(budget)):
            raise ValueError(f"{exp_dir / RECORD}: profile {name!r} has a budget {budget!r}: allowed a name of "
                             f"letters, digits, '_' and '-'{HINT}")
    runs, out = read_runs(exp_dir)[0], []
    for budget in budgets:
        mine = {t: [e for e in rec.get(t) or [] if _budget_of(e, axes) == budget] for t in ("families", "ablations")}
        tuning = {k: [c for c in v if _budget_of(c, axes) == budget]
                  for k, v in (rec.get("tuning") or {}).items() if isinstance(v, list)}
        sub = {**rec, **mine, "tuning": tuning, "axes": {**axes, "budget": budget}}
        p = Profile(name, sub, exp_dir, budget, len(budgets) > 1)
        for e in mine["families"] + mine["ablations"]:
            run_dir = located(exp_dir, e["run"])  # its own, or a shared run of another experiment
            run = runs.get(e["run"])
            if run is not None:
                # a record from before identity.json held its settings itself
                p.runs[e["run"]] = replace(run.summary, identity=run.identity or run.summary.identity or {})
            probes = read_record(run_dir / PROBES, HINT)
            if probes:
                p.probes[e["run"]] = probes
        family_runs = {e["run"].rsplit("/", 1)[-1] for e in mine["families"]}  # a CKA record names the folder
        p.cka = [c for c in (read_record(cka_path(exp_dir, path), HINT) for path in rec.get("cka") or [])
                 if c and c.get("run") in family_runs]
        out.append(p)
    return out
def accs(cell: dict[int, dict]) -> dict[int, float]:
    return {seed: _test_acc(s) for seed, s in cell.items()}



def ablation_rows(p: Profile) -> list[dict]:
    rows = []
    for v in p.variants():
        for f in p.fractions("ablations"):
            cell = p.cell("ablations", "variant", v, f)
            if not cell and not any(e["variant"] == v and e["fraction"] == f for e in p.entries("ablations")):
                continue
            mine, base = accs(cell), accs(p.cell("ablations", "variant", BASELINE, f))
            tables = [x for x in map(pos_structure, p.ablation_probes(v, f).values()) if x]
            grid = _est(t.get("grid_correlation") for t in tables)
            rows.append({"profile": p.name, "table": "ablation", "name": v, "fraction": f,
                         "train_size": p.size(f), "val_size": p.size(f, "val_size"), "seeds": len(cell),
                         "lr": one_value(s.identity.get("model.lr") for s in cell.values()),
                         "steps": one_value(s.steps for s in cell.values()),
                         "acc": _est(mine.values()), "delta": None if v == BASELINE else paired_difference(mine, base),
                         "still_improving": sum(still_improving(s) for s in cell.values()), "grid": grid,
                         **{k: _est(t.get(k) for t in tables) for k in STRUCTURE},
                         "two_d": [bool(t.get("two_d")) for t in tables]})
    return rows


def one_value(values):
    """The value all of `values` share (None ignored), "varies" where they differ, None without any."""
    vals = {v for v in values if v is not None}
    return vals.pop() if len(vals) == 1 else (None if not vals else "varies")


def _at(xs: list, ys: list, x):
    return ys[xs.index(x)] if x in xs else None


def _layer_means(dist: list[list]) -> list[float]:
    """Mean over a layer's heads (NaN-padded heads of Swin's earlier stages left out)."""
    return [statistics.fmean([v for v in row if v is not None]) for row in dist]


def blanked_black(robustness: dict) -> bool:
    """Whether a robustness record blanked PatchDrop's cells and a shift's border black, as Naseer et
    al. do (modules/probes/robustness.py). A record without `fill` was probed with the dataset's mean
    colour, which on a black background adds a grey square of its own: its PatchDrop and shift
    numbers measure something else, and are not read (shuffling blanks nothing: it is read)."""
    return robustness.get("fill") == FILL


# what the readings say where a family's robustness records blanked with the older fill
OLDER_FILL = ("not read: these runs' probes blanked PatchDrop's cells and a shift's border with the dataset's mean "
              "colour, not black (0 before normalisation) as Naseer et al. do; on Fashion-MNIST's black background "
              "that is a grey square a model reads as content (docs/history.md, \"PatchDrop's fill\"), and "
              "`make exp-inductive-bias` probes them again")


def older_fill(p: "Profile", rows: list[dict]) -> bool:
    """Whether some run behind `rows` has a robustness record blanked with the older fill: what a
    missing PatchDrop or shift number is then owed to (not to robustness never having been probed)."""
    return any(x.get("robustness") and not blanked_black(x["robustness"])
               for r in rows for x in p.probe_cell(r["name"], r["fraction"]).values())


def probe_metrics(probes: dict) -> dict:
    """One run's probe numbers the tables quote."""
    r = probes.get("robustness") or {}
    out = {}
    if r:
        out["clean"] = r["clean_accuracy"]
        out["majority"] = r.get("majority_rate")  # absent from records made before it was probed
        out["shuffle4"] = _at(r["shuffle_grids"], r["shuffle_accuracy"], 4)
        if blanked_black(r):  # what a dropped cell or a shift's border holds decides what they measure
            out["patchdrop"] = _at(r["drop_fractions"], r["patchdrop_accuracy"], DROP_AT)
            if r.get("patchdrop_top_share"):
                out["top_share"] = _at(r["drop_fractions"], r["patchdrop_top_share"], DROP_AT)
            out["shift_patch"] = _at(r["shifts"], r["shift_accuracy"], r["patch"])
            out["consistency"] = r["shift_consistency"]
    dist = probes.get("attention_distance")
    if dist:
        layers = _layer_means(dist)
        out.update(dist_first=layers[0], dist_last=layers[-1], dist_growth=layers[-1] - layers[0],
                   first_heads=[v for v in dist[0] if v is not None])
        uniform = probes.get("attention_distance_uniform")
        if uniform:  # each layer's mean distance over its uniform-attention distance (1: nothing learned)
            ref = _layer_means(uniform)
            out.update(uniform_first=ref[0], uniform_last=ref[-1], rel_first=layers[0] / ref[0],
                       rel_last=layers[-1] / ref[-1], rel_mean=statistics.fmean(d / u for d, u in zip(layers, ref)))
    entropy = probes.get("attention_entropy")
    if entropy:  # entropy over uniform attention's, mean over a layer's heads (1: uniform)
        layers = _layer_means(entropy)
        out.update(entropy_first=layers[0], entropy_last=layers[-1])
    structure = pos_structure(probes)
    if structure:
        out["grid"] = structure["grid_correlation"]
        out["two_d"] = structure["two_d"]
    return out
STRUCTURE = ("neighbour_mean", "horizontal_mean", "vertical_mean", "far_mean")  # the numbers a 2D verdict quotes

STRUCTURE_MIN_GAP = 0.1  # modules.probes.pos_embed's (imported there with torch; the tables import no torch)



def pos_structure(probes: dict) -> dict | None:
    """A run's position-table structure (modules.probes.pos_embed_2d_structure), read again from its
    recorded similarity where it has one, so that a record probed under an older rule is judged by
    today's; None for a run without a table."""
    table = probes.get("pos_embed")
    if not table:
        return None
    if not table.get("similarity"):
        return table
    import numpy as np
    import torch

    from modules.probes import pos_embed_2d_structure
    # probes.json writes an undefined similarity as null: NaN again, as the probe computed it
    return pos_embed_2d_structure(torch.tensor(np.array(table["similarity"], dtype=np.float64)))


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # a budget as a record names it
_CKA_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.json")  # <run>__<reference run>.json: longer than a run's name


def cka_path(exp_dir: Path, entry) -> Path:
    """The file of a record's CKA entry, which must name a file of the experiment's cka/ folder: a
    record is data, and one pointing elsewhere ('../x.json', an absolute path) is an error line."""
    parts = Path(entry).parts if isinstance(entry, str) else ()
    if len(parts) != 2 or parts[0] != CKA_DIR:
        raise ValueError(f"{exp_dir / RECORD}: a cka entry {entry!r} is not valid: allowed {CKA_DIR}/<file name>.json")
    if not _CKA_FILE.fullmatch(parts[1]) or ".." in parts[1]:
        raise ValueError(f"{exp_dir / RECORD}: a cka entry {entry!r} is not valid: allowed {CKA_DIR}/<file name>.json, "
                         "a name of letters, digits, '.', '_' and '-'")
    return exp_dir / CKA_DIR / parts[1]


def cka_last(p: Profile, family: str, fraction: float) -> float | None:
    for c in p.cka:
        if c.get("family") == family and c.get("fraction") == fraction:
            return c["matrix"][-1][-1]
    return None


def family_rows(p: Profile) -> list[dict]:
    rows = []
    for fam in p.families():
        for f in p.fractions("families"):
            cell = p.cell("families", "family", fam, f)
            metrics = [probe_metrics(x) for x in p.probe_cell(fam, f).values()]

            def m(key):
                return _est(x.get(key) for x in metrics)
            rows.append({"profile": p.name, "table": "family", "name": fam, "fraction": f, "train_size": p.size(f),
                         "val_size": p.size(f, "val_size"), "seeds": len(cell),
                         "lr": one_value(s.identity.get("model.lr") for s in cell.values()),
                         "steps": one_value(s.steps for s in cell.values()), "acc": _est(accs(cell).values()),
                         "still_improving": sum(still_improving(s) for s in cell.values()),
                         "clean": m("clean"), "majority": m("majority"), "top_share": m("top_share"),
                         "patchdrop": m("patchdrop"), "shuffle4": m("shuffle4"),
                         "shift_patch": m("shift_patch"), "consistency": m("consistency"),
                         "dist_first": m("dist_first"), "dist_last": m("dist_last"), "dist_growth": m("dist_growth"),
                         "uniform_first": m("uniform_first"), "uniform_last": m("uniform_last"),
                         "rel_first": m("rel_first"), "rel_last": m("rel_last"),
                         "entropy_first": m("entropy_first"), "entropy_last": m("entropy_last"),
                         "first_heads": [h for x in metrics for h in x.get("first_heads", [])],
                         "grid": m("grid"), "two_d": [x["two_d"] for x in metrics if "two_d" in x],
                         "cka": cka_last(p, fam, f)})
    return rows
def _v(est: Estimate | None, part: str = "value"):
    if est is None:
        return ""
    x = est.value if part == "value" else est.ci95
    return "" if x is None else round(x, 6)



def csv_rows(p: Profile) -> list[dict]:
    out = []
    for r in ablation_rows(p) + family_rows(p):
        row = {"profile": r["profile"], "budget": p.budget, "table": r["table"], "name": r["name"], "fraction": r["fraction"],
               "train_size": r["train_size"], "val_size": r["val_size"], "seeds": r["seeds"], "lr": r["lr"],
               "steps": r["steps"], "test_acc_mean": _v(r["acc"]), "test_acc_ci95": _v(r["acc"], "ci"),
               "delta_vs_learn": _v(r.get("delta")), "delta_vs_learn_ci95": _v(r.get("delta"), "ci"),
               "still_improving": r["still_improving"], "pos_grid_correlation_mean": _v(r.get("grid")),
               "pos_grid_correlation_ci95": _v(r.get("grid"), "ci"),
               "pos_two_d_seeds": f"{sum(r['two_d'])}/{len(r['two_d'])}" if r.get("two_d") else "",
               "clean_acc_mean": _v(r.get("clean")), f"patchdrop_{DROP_AT:g}_mean": _v(r.get("patchdrop")),
               f"patchdrop_{DROP_AT:g}_ci95": _v(r.get("patchdrop"), "ci"), "shuffle_grid4_mean": _v(r.get("shuffle4")),
               "shuffle_grid4_ci95": _v(r.get("shuffle4"), "ci"), "shift_patch_acc_mean": _v(r.get("shift_patch")),
               "shift_consistency_mean": _v(r.get("consistency")),
               "shift_consistency_ci95": _v(r.get("consistency"), "ci"),
               "attention_distance_first_mean": _v(r.get("dist_first")),
               "attention_distance_last_mean": _v(r.get("dist_last")),
               "attention_distance_growth_mean": _v(r.get("dist_growth")),
               "attention_distance_growth_ci95": _v(r.get("dist_growth"), "ci"),
               "cka_last_vs_resnet_last": "" if r.get("cka") is None else r["cka"]}
        out.append(row)
    return out
UNIFORM_TOLERANCE = 0.05  # every layer within 5% of its uniform-attention distance: attention not yet learned



def still_uniform(families: list[dict]) -> list[str]:
    """The attention families whose first and last layers attend as far as uniform attention would,
    each once, with its training-set sizes where there are several (rows: one per family and size)."""
    sizes: dict[str, list] = {}
    for r in families:
        if r.get("rel_first") is not None and abs(r["rel_first"].value - 1) < UNIFORM_TOLERANCE \
                and abs(r["rel_last"].value - 1) < UNIFORM_TOLERANCE:
            sizes.setdefault(r["name"], []).append(r.get("train_size"))
    several = len({r.get("train_size") for r in families}) > 1
    return [name + (f" (at {' and '.join(f'{n:,}' for n in found)} images)" if several and None not in found else "")
            for name, found in sizes.items()]



def locality(p: Profile, family: str = "vit") -> dict | None:
    """How far `family`'s heads attend relative to uniform attention (mean over layers of mean
    distance / uniform distance; 1: not learned where to look, below 1: local), per family
    training-set size, and its change from the smallest to the largest size paired by seed.
    None without probed runs at two sizes."""
    sizes = p.fractions("families")
    by = {f: {seed: v for seed, x in p.probe_cell(family, f).items()
              if (v := probe_metrics(x).get("rel_mean")) is not None} for f in sizes}
    sizes = [f for f in sizes if by[f]]
    if len(sizes) < 2:
        return None
    small, large = sizes[0], sizes[-1]
    return {"family": family, "small": small, "large": large, "per_size": {f: _est(by[f].values()) for f in sizes},
            "change": paired_difference(by[large], by[small])}
def growth_claim(r: dict) -> Claim:
    """Whether a family row's mean attention distance grows from its first layer to its last,
    resting on the row's runs."""
    return Claim(CLAIMS["attention_growth"], r["dist_growth"], runs=r["seeds"], improving=r["still_improving"])


def position_claims(p: Profile, ablations: list[dict]) -> list[tuple[dict, Claim]]:
    """ViT Table 8's position-embedding claim at each ablation size with a pair: none − learn, paired
    by seed, resting on the none and learn runs of that size. The reading, the ablation figure's
    verdict and the Findings all read these."""
    out = []
    for r in (r for r in ablations if r["name"] == "none" and r["delta"] is not None):
        behind = position_behind(p, r["fraction"])
        out.append((r, Claim(CLAIMS["position_embedding"], r["delta"], runs=len(behind),
                             improving=sum(still_improving(s) for s in behind))))
    return out


def position_behind(p: Profile, fraction: float) -> list[dict]:
    """The runs the position-embedding claim at `fraction` rests on: none's and learn's."""
    return [*p.cell("ablations", "variant", "none", fraction).values(),
            *p.cell("ablations", "variant", BASELINE, fraction).values()]


def locality_claim(p: Profile, loc: dict) -> Claim:
    """Whether `loc`'s family attends more locally at its largest family size than at its smallest."""
    improving, behind = locality_settled(p, loc, loc["family"])
    return Claim(CLAIMS["locality"], loc["change"], runs=len(behind), improving=improving)


def settled_rows(ablations: list[dict], families: list[dict]) -> tuple[list[dict], list[dict], list[str]]:
    """Converged or silent, per reading: the ablation rows whose runs and whose `learn` baseline at the
    same size all plateaued, the family rows whose runs all plateaued, and the labels of the rows left out."""
    learn_open = {r["fraction"] for r in ablations if r["name"] == BASELINE and r["still_improving"]}
    abl = [r for r in ablations if not r["still_improving"] and r["fraction"] not in learn_open]
    fam = [r for r in families if not r["still_improving"]]
    left = [f"{r['name']} at {r['fraction']:g}" for r in [*ablations, *families] if r not in abl and r not in fam]
    return abl, fam, left


def locality_settled(p: Profile, loc: dict, family: str = "vit") -> tuple[int, list[dict]]:
    """(runs still improving, runs) behind the locality reading: the family's runs at its two sizes."""
    runs = [s for f in (loc["small"], loc["large"]) for s in p.cell("families", "family", family, f).values()]
    return sum(still_improving(s) for s in runs), runs
SINGLE_CLASS = 0.99  # a model whose most-predicted class takes this share of the probe images answers one class



def kept(families: list[dict], key: str) -> tuple[dict[str, float], str]:
    """Each family's accuracy under the probe `key` as a share of its clean accuracy, chance-corrected:
    (acc − m) / (clean − m), m the probe images' majority-class rate (0: no better than always
    answering the commonest class; 1: nothing lost). Records made before m was probed give acc / clean,
    and the text says so. Returns the shares and the words for what they are."""
    rows = [r for r in families if r[key] is not None and r["clean"] is not None]
    corrected = bool(rows) and all(r.get("majority") is not None for r in rows)
    shares = {}
    for r in rows:
        m = r["majority"].value if corrected else 0.0
        if r["clean"].value > m:
            shares[r["name"]] = (r[key].value - m) / (r["clean"].value - m)
    words = ("share of its clean accuracy above chance, (acc − majority-class rate) / (clean − majority-class rate)"
             if corrected else "share of its clean accuracy, acc / clean (uncorrected for chance: these probe records "
             "predate the majority-class rate, so 0 is not where a model answering one class lands)")
    return shares, words
def kept_by_seed(p: Profile, family: str, fraction: float, key: str) -> dict[int, float]:
    """seed -> the share `kept` gives, for one run's probe: (acc − m) / (clean − m) with that run's
    own majority-class rate m (runs whose clean accuracy is not above m are left out)."""
    out = {}
    for seed, x in p.probe_cell(family, fraction).items():
        r = probe_metrics(x)
        v, clean = r.get(key), r.get("clean")
        m = r.get("majority") or 0.0  # records made before the majority rate was probed: acc / clean, as kept()
        if v is not None and clean is not None and clean > m:
            out[seed] = (v - m) / (clean - m)
    return out


def robustness_claims(p: Profile, fraction: float, key: str, among: set[str] | None = None
                      ) -> list[tuple[str, str, Claim]]:
    """(transformer, CNN, the claim that the transformer keeps more under the probe `key`: the paired
    difference of their kept shares by seed) for every transformer and CNN family probed at
    `fraction` (those in `among`, where given: the reading's plateaued rows), each resting on the two
    families' runs at that size."""
    fams = [f for f in p.families() if p.probe_cell(f, fraction) and (among is None or f in among)]
    return [(t, c, _robustness_claim(p, fraction, key, t, c))
            for t in fams if kind_of(t) == "transformer" for c in fams if kind_of(c) == "CNN"]


def _robustness_claim(p: Profile, fraction: float, key: str, transformer: str, cnn: str) -> Claim:
    behind = [s for f in (transformer, cnn) for s in p.cell("families", "family", f, fraction).values()]
    return Claim(CLAIMS[f"robustness_{key}"].filled(transformer=transformer, cnn=cnn),
                 paired_difference(kept_by_seed(p, transformer, fraction, key), kept_by_seed(p, cnn, fraction, key)),
                 runs=len(behind), improving=sum(still_improving(s) for s in behind))



def single_class(families: list[dict]) -> list[str]:
    """The families whose predictions collapse to one class with DROP_AT of the cells dropped."""
    return [r["name"] for r in families if r.get("top_share") is not None and r["top_share"].value >= SINGLE_CLASS]


def _concentration(maps: list) -> float:
    """Share of a map's mass on its 10% most-attended patches, mean over images (uniform: 0.1)."""
    shares = []
    for m in maps:
        flat = sorted((v for row in m for v in row if v is not None and v == v), reverse=True)  # null: NaN written
        k = max(1, round(0.1 * len(flat)))
        shares.append(sum(flat[:k]) / sum(flat))
    return statistics.fmean(shares)
def load(exp_dir: Path) -> list[Profile]:
    """Every profile (and budget) of inductive_bias.json with a finished run (ValueError naming what is missing)."""
    record = read_record(exp_dir / RECORD, HINT)
    if not record:  # the runner writes it when its first runs have finished
        raise NothingFinished(f"no {RECORD} in {exp_dir} yet: run make exp-inductive-bias first")
    if not isinstance(record.get("profiles"), dict):
        raise ValueError(f"{exp_dir / RECORD} has no profiles{HINT}")
    profiles = [p for n, rec in record["profiles"].items() for p in load_profiles(n, rec, exp_dir)]
    profiles = [p for p in profiles if any(s.status == "done" for s in p.runs.values())]
    if not profiles:
        raise NothingFinished(f"no finished inductive-bias runs in {exp_dir}: run make exp-inductive-bias first")
    return profiles

