"""The launcher options of the spec runners (sweep, distill, inductive_bias): which launcher
(local, submitit-local, slurm), the SLURM resources per task (partition, account, GPUs, CPUs,
memory, time limit, array parallelism, retries), from the command line over the profile's
`cluster:` mapping, every value checked. What the launchers do with them is in slurm.py.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields

LAUNCHERS = ("local", "submitit-local", "slurm")
CLUSTER_KEYS = {"partition", "account", "gpus", "cpus", "mem_gb", "time_min", "array_parallelism", "retries",
                "signal_delay_s"}


class Submitted(Exception):
    """Raised through a runner after a --no_wait submission: the rest of the chain is the scheduler's."""


@dataclass
class ClusterOptions:
    launcher: str = "local"
    partition: str | None = None
    account: str | None = None
    gpus: int | None = None            # per task (None: 0 on SLURM; every visible GPU on the local executor)
    cpus: int | None = None            # per task
    mem_gb: int | None = None          # per task
    time_min: int = 240                # time limit of a task; submitit's signal comes signal_delay_s before it
    array_parallelism: int | None = None  # tasks of an array at once (default: the profile's jobs locally, 256 on SLURM)
    retries: int = 2                   # a failing run is run again up to this many times, then reported
    signal_delay_s: int = 120
    wait: bool = True
    chained: bool = False              # a continuation job's invocation: runs that failed (retries spent) stay failed
    runner: str = "sweep"              # the command a continuation job runs again, with argv
    argv: list[str] = field(default_factory=list)
    tables_out: str = "results"

    @property
    def submitit(self) -> bool:
        return self.launcher != "local"


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launcher (experiments/runs/sweep/slurm.py)")
    g.add_argument("--launcher", choices=LAUNCHERS, default="local",
                   help="local (default): each run a process here; slurm: each stage one SLURM job array through "
                        "submitit; submitit-local: the same through submitit's local executor")
    g.add_argument("--partition", help="SLURM partition (default: the profile's cluster.partition, else the cluster's)")
    g.add_argument("--account", help="SLURM account to charge (default: the profile's cluster.account)")
    g.add_argument("--gpus", type=int, help="GPUs per task (default: the profile's cluster.gpus)")
    g.add_argument("--cpus", type=int, help="CPUs per task (default: the profile's cluster.cpus)")
    g.add_argument("--mem_gb", type=int, help="memory per task in GB (default: the profile's cluster.mem_gb)")
    g.add_argument("--time_min", type=int, help="time limit per task in minutes (default: the profile's "
                                                "cluster.time_min, else 240); a task past it requeues itself")
    g.add_argument("--array_parallelism", type=int, help="tasks of an array running at once (default: the "
                                                         "profile's cluster.array_parallelism)")
    g.add_argument("--retries", type=int, help="times a failing run is run again before it is reported (default 2)")
    g.add_argument("--no_wait", action="store_true", help="with slurm or submitit-local: submit and return at once; "
                                                          "the scheduler chains the stages (watch with --status)")
    g.add_argument("--status", action="store_true", help="print every planned run's state from its folder "
                                                         "(done, running, failed, diverged, pending); run nothing")
    g.add_argument("--chained", action="store_true", help=argparse.SUPPRESS)  # set by the continuation job
    g.add_argument("--tables_out", default="results", help="where the tables go once a slurm or submitit-local "
                                                           "run is done (default results)")


def check_cluster(cluster, where: str) -> dict:
    """A profile's `cluster:` mapping, every key known and every value of its type."""
    if cluster is None:
        return {}
    if not isinstance(cluster, dict):
        raise ValueError(f"cluster in {where}: allowed a mapping of {', '.join(sorted(CLUSTER_KEYS))}")
    unknown = sorted(set(cluster) - CLUSTER_KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} in cluster of {where}: allowed {', '.join(sorted(CLUSTER_KEYS))}")
    for k, v in cluster.items():
        if k in ("partition", "account"):
            if not isinstance(v, str) or not v:
                raise ValueError(f"cluster.{k}={v!r} in {where}: allowed a non-empty name")
        else:
            _check_int(f"cluster.{k}={v!r} in {where}", v, 0 if k in ("gpus", "retries") else 1)
    return dict(cluster)


def _check_int(what: str, v, least: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{what}: allowed an integer >= {least}")


def options_from(a: argparse.Namespace, profile_cluster: dict | None, runner: str, argv: list[str],
                 jobs: int = 1) -> ClusterOptions:
    """The launcher's options: the command line over the profile's cluster mapping; every value checked."""
    c = dict(profile_cluster or {})
    for k in ("partition", "account", "gpus", "cpus", "mem_gb", "time_min", "array_parallelism", "retries"):
        v = getattr(a, k, None)
        if v is not None:
            if k not in ("partition", "account"):
                _check_int(f"--{k} {v}", v, 0 if k in ("gpus", "retries") else 1)
            elif not v:
                raise ValueError(f"--{k} {v!r}: allowed a non-empty name")
            c[k] = v
    if a.no_wait and a.launcher == "local":
        raise ValueError("--no_wait with --launcher local: allowed with --launcher slurm or submitit-local")
    opts = ClusterOptions(launcher=a.launcher, wait=not a.no_wait, runner=runner, chained=a.chained,
                          argv=[x for x in argv if x != "--chained"],
                          tables_out=a.tables_out, **{k: v for k, v in c.items() if k in {f.name for f in fields(ClusterOptions)}})
    if opts.array_parallelism is None and opts.launcher == "submitit-local":
        opts.array_parallelism = jobs
    return opts
