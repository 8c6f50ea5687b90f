"""How the benchmark scripts launch a partitioned artifact's ranks.

MPIRUN is a local Open MPI job over shared memory (as test/lit.cfg.py's
%mpirun): allowed to oversubscribe the cores, unbound, single-copy off
(containers often forbid the cross-process memory access CMA needs).
ranks_of reads an artifact's (tp, pp) from its manifest; launch_env is the
environment mpirun needs when run as root.
"""
import json
import os

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
          "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none",
          "--mca", "pml", "ob1"]


def ranks_of(art):
    """(tp, pp) of an artifact (1, 1 when it is not partitioned)."""
    with open(os.path.join(art, "manifest.json")) as f:
        p = json.load(f).get("parallel", {})
    return int(p.get("tp", 1)), int(p.get("pp", 1))


def launch_env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
