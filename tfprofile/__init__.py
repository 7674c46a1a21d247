"""Reading TensorFlow traces of a 1-PS/1-worker run into operation DAGs, and TicTac's orders.

The data types (:class:`Profile`, :class:`OpGraph`, :class:`Resource`) import nothing
heavy; the readers load the protobuf definitions only when called::

    import tfprofile
    profile = tfprofile.read_profile("runs/resnet50")      # a run directory
    tfprofile.save_profile(profile, "resnet50.npz")
    print(tfprofile.summarize(profile)["step_time_s"])

Like :mod:`simulate`, the readers are bound on first use, and no public name is the name of
a submodule (a submodule, once imported, would shadow it).
"""

from tfbase.lazy import lazy_attributes
from tfprofile.dag import OpGraph, Profile, Resource, VariableTable

# public name -> the submodule that defines it
_PUBLIC = {
    "read_profile": "tfprofile.api",
    "load_profile": "tfprofile.api",
    "save_profile": "tfprofile.api",
    "summarize": "tfprofile.summary",
    "compute_ordering": "tfprofile.tictac",
    "profile_efficiency": "tfprofile.tictac",
}

__all__ = ["OpGraph", "Profile", "Resource", "VariableTable", *sorted(_PUBLIC)]

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
