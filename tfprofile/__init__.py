"""Reading TensorFlow traces of a 1-PS/1-worker run into operation DAGs.

The data types (:class:`Profile`, :class:`OpGraph`, :class:`Resource`) import nothing
heavy; the readers load the protobuf definitions only when called::

    import tfprofile
    profile = tfprofile.read_profile("runs/resnet50")      # a run directory
    tfprofile.save_profile(profile, "resnet50.npz")
    print(tfprofile.summarize(profile)["step_time_s"])
"""

from tfprofile.dag import OpGraph, Profile, Resource, VariableTable

__all__ = ["OpGraph", "Profile", "Resource", "VariableTable", "read_profile", "load_profile", "save_profile",
           "summarize"]


def __getattr__(name: str):
    # The readers are imported on first use, so that importing the data types stays cheap.
    if name in ("read_profile", "load_profile", "save_profile"):
        from tfprofile import api

        return getattr(api, name)
    if name == "summarize":
        from tfprofile.summary import summarize

        return summarize
    raise AttributeError(f"module 'tfprofile' has no attribute {name!r}")
