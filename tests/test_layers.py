"""The house's floors: each layer imports only the layers below it, so a run trains without the
report that reads it, and a model builds without the runs that train it.

    modules/, datamodules/                        the models and the data (the ground)
    experiments/statistics.py, figures.py, ...    helpers of every layer above them
    experiments/runs/                             one run, and the sweep of many
    experiments/report/                           the tables' shared reading of the run records
    experiments/<experiment>/, experiments/tables.py, experiments/__main__.py   the experiments

Static imports only: the sweep finds each experiment's runner by name (importlib), as a registry
does, and that is no arrow back up.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT_FOLDERS = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/spec.yaml"))
TOP = ["experiments.tables", "experiments.__main__"]
# layer -> the imports it must not make (a module, or any module under it)
FORBIDDEN = {
    "modules": ["datamodules", "experiments"],
    "datamodules": ["experiments"],
    "experiments/runs": ["experiments.report", *TOP, *(f"experiments.{e}" for e in EXPERIMENT_FOLDERS)],
    "experiments/report": TOP + [f"experiments.{e}" for e in EXPERIMENT_FOLDERS],
}
HELPERS = ["experiments/statistics.py", "experiments/figures.py", "experiments/families.py"]


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module the file imports by name (`from a.b import c` gives a.b and a.b.c); a relative
    import by the absolute name it resolves to from the file's package under `root`."""
    package = list(path.relative_to(root).parent.parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out |= ({module} if node.module else set()) | {f"{module}.{a.name}" for a in node.names}
    return out


def breaks(path: Path, forbidden: list[str], root: Path = ROOT) -> list[str]:
    return sorted(m for m in imports(path, root) for f in forbidden if m == f or m.startswith(f + "."))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer):
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, layer
    upward = {str(f.relative_to(ROOT)): b for f in files if (b := breaks(f, FORBIDDEN[layer]))}
    assert not upward, f"imports from a layer above {layer}: {upward}"


@pytest.mark.parametrize("helper", HELPERS)
def test_the_shared_helpers_import_no_layer_of_experiments(helper):
    assert not breaks(ROOT / helper, ["experiments"]), helper


def test_the_check_catches_an_import_back_up(tmp_path):
    (tmp_path / "experiments" / "runs" / "run").mkdir(parents=True)
    f = tmp_path / "experiments" / "runs" / "run" / "convergence.py"
    f.write_text("import math\nfrom experiments.report.statistics import ols_slope\n")
    assert breaks(f, FORBIDDEN["experiments/runs"], tmp_path) == ["experiments.report.statistics",
                                                                    "experiments.report.statistics.ols_slope"]
    f.write_text("from ...report.records import read_runs\nfrom ... import report\nfrom .summary import Summary\n")
    assert breaks(f, FORBIDDEN["experiments/runs"], tmp_path) == ["experiments.report", "experiments.report.records",
                                                                    "experiments.report.records.read_runs"]
    f.write_text("from experiments.statistics import ols_slope\nfrom experiments.runs.run import summary_check\n"
                 "from .summary import Summary\nfrom .. import sweep\n")
    assert breaks(f, FORBIDDEN["experiments/runs"], tmp_path) == []
