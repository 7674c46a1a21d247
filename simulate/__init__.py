"""Throughput prediction: the trace-generation simulator and the coarse analytical baselines.

``simulate.predict(profile, cluster, workers=...)`` is the entry point; it returns a pandas
DataFrame with one row per configuration. This package depends on the profile data types
(:mod:`tfprofile.dag`), never on the trace readers.

The public names below are bound on first use, so that ``import simulate`` stays light (the
engine pulls in numba, the tables pandas). No public name is also the name of a submodule:
importing a submodule binds it as an attribute of the package, which would shadow a
function of the same name.
"""

from tfbase.lazy import lazy_attributes

# public name -> the submodule that defines it
_PUBLIC = {
    "predict": "simulate.sweep",
    "traced_run": "simulate.sweep",
    "parse_workers": "simulate.sweep",
    "baselines": "simulate.coarse",
    "order_gains": "simulate.orderings",
    "ordering_priorities": "simulate.orderings",
    "ClusterModel": "simulate.cluster",
    "FlowControl": "simulate.cluster",
    "Overhead": "simulate.cluster",
    "load_cluster": "simulate.cluster_file",
    "resolve_cluster": "simulate.cluster_file",
    "save_cluster": "simulate.cluster_file",
    "Prices": "simulate.planning",
    "add_costs": "simulate.planning",
    "cheapest": "simulate.planning",
    "pareto_front": "simulate.planning",
    "scale_compute": "simulate.whatif",
    "SimConfig": "simulate.config",
    "Colocation": "simulate.config",
    "TaskHosts": "simulate.config",
    "WorkerSpeeds": "simulate.config",
    "Mode": "simulate.config",
    "Sharing": "simulate.config",
    "Transfer": "simulate.config",
    "Enforcement": "simulate.config",
    "TieOrder": "simulate.config",
    "Placement": "simulate.config",
    "PacketNetwork": "simulate.config",
    "CongestionControl": "simulate.config",
    "WindowLimit": "simulate.config",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
