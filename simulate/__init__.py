"""Throughput prediction: the trace-generation simulator and the coarse analytical baselines.

``simulate.predict(profile, cluster, workers=...)`` is the entry point; it returns a pandas
DataFrame with one row per configuration. This package depends on the profile data types
(:mod:`tfprofile.dag`), never on the trace readers.
"""

__all__ = ["predict", "ClusterModel", "SimConfig", "Mode", "Sharing", "Transfer"]


def __getattr__(name: str):
    # Imported on first use: the engine pulls in numba, which importing the data types should not.
    if name == "predict":
        from simulate.predict import predict

        return predict
    if name == "ClusterModel":
        from simulate.cluster import ClusterModel

        return ClusterModel
    if name in ("SimConfig", "Mode", "Sharing", "Transfer"):
        from simulate import config

        return getattr(config, name)
    raise AttributeError(f"module 'simulate' has no attribute {name!r}")
