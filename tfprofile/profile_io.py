"""The profile file: one ``.npz`` archive, format ``tfsim.profile/1``.

Layout (every member a numpy array; strings as fixed-width unicode, so loading never
unpickles anything):

================== ============ =======================================================
member             shape        meaning
================== ============ =======================================================
format             ()           ``"tfsim.profile/1"``
meta_json          ()           provenance as JSON (model, source, versions, machine)
batch_size         ()           examples per step and worker
op_name            (n,)         op name; a transfer's rendezvous key (``edge_N_...``)
op_type            (n,)         TensorFlow op type, ``"Transfer"`` for transfers
op_resource        (n,)         0 DOWNLINK, 1 WORKER, 2 UPLINK, 3 PS
op_server          (n,)         PS task index, -1 for WORKER ops
op_size_bytes      (n,)         transfer size, 0 for computation
op_variable        (n,)         index into var_* of the parameter an op carries, or -1
data_ptr/data_idx  (n+1,)/(e,)  CSR successors along data edges
ctrl_ptr/ctrl_idx  (n+1,)/(c,)  CSR successors along control edges
duration_s         (S, n)       recorded duration per profiled step
start_s            (S, n)       recorded start relative to the step start (NaN: unknown)
step_makespan_s    (S,)         span of each traced step
step_wall_s        (m,)         measured wall time of every measured step
var_name, var_size_bytes, var_server, var_trainable    the variable table
================== ============ =======================================================

The graph is stored once; durations per step. Ops are in topological order.
"""

from __future__ import annotations

import json
import os
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from tfbase.errors import ProfileFormatError
from tfbase.fileio import atomic_output
from tfprofile.dag import OpGraph, Profile, VariableTable

PROFILE_FORMAT = "tfsim.profile/1"

_GRAPH_FIELDS = {
    "op_name": "name", "op_type": "op_type", "op_resource": "resource", "op_server": "server",
    "op_size_bytes": "size_bytes", "op_variable": "variable", "data_ptr": "data_ptr", "data_idx": "data_idx",
    "ctrl_ptr": "ctrl_ptr", "ctrl_idx": "ctrl_idx",
}
_VAR_FIELDS = {"var_name": "name", "var_size_bytes": "size_bytes", "var_server": "server",
               "var_trainable": "trainable"}


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write ``profile`` to ``path`` as a ``tfsim.profile/1`` archive (docs/formats.md §3).

    The file is written atomically, and equal profiles give equal bytes.

    Examples
    --------
    >>> import tempfile, os, tfprofile
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> path = os.path.join(tempfile.mkdtemp(), "copy.npz")
    >>> tfprofile.save_profile(profile, path)
    >>> open(path, "rb").read() == open("data/profiles/tiny.npz", "rb").read()
    True
    """
    arrays = {
        "format": np.array(PROFILE_FORMAT),
        "meta_json": np.array(json.dumps(profile.meta, sort_keys=True)),
        "batch_size": np.array(profile.batch_size, dtype=np.int64),
        "duration_s": profile.duration_s,
        "start_s": profile.start_s,
        "step_makespan_s": profile.step_makespan_s,
        "step_wall_s": profile.step_wall_s,
    }
    arrays.update({key: getattr(profile.graph, field) for key, field in _GRAPH_FIELDS.items()})
    arrays.update({key: getattr(profile.variables, field) for key, field in _VAR_FIELDS.items()})
    with atomic_output(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a ``tfsim.profile/1`` file (docs/formats.md §3); nothing is unpickled.

    Raises
    ------
    tfbase.errors.ProfileFormatError
        The file is missing, not a tfsim profile, of another format version, or inconsistent.

    Examples
    --------
    >>> import tfprofile
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> profile.graph.n_ops, profile.duration_s.shape
    (93, (30, 93))
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "format" not in archive.files:
                raise ProfileFormatError(path, "not a tfsim profile (no format member)")
            fmt = str(archive["format"])
            if fmt != PROFILE_FORMAT:
                raise ProfileFormatError(path, f"format {fmt!r} is not supported; this tfsim reads {PROFILE_FORMAT!r}")
            missing = [k for k in (*_GRAPH_FIELDS, *_VAR_FIELDS, "meta_json", "batch_size", "duration_s", "start_s",
                                   "step_makespan_s", "step_wall_s") if k not in archive.files]
            if missing:
                raise ProfileFormatError(path, f"profile lacks {', '.join(missing)}")
            data = {k: archive[k] for k in archive.files}
    except FileNotFoundError:
        raise ProfileFormatError(path, "no such file") from None
    except ProfileFormatError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error, NotImplementedError,
            tokenize.TokenError) as exc:
        # NotImplementedError: a zip member compressed with a method zipfile does not know;
        # TokenError: an array header numpy cannot tokenize
        raise ProfileFormatError(path, f"not a tfsim profile (.npz) or corrupt ({exc})") from None
    except MemoryError:  # an array header declaring more elements than memory holds
        raise ProfileFormatError(path, "corrupt: an array is larger than memory") from None
    try:
        meta = json.loads(str(data["meta_json"]))
        graph = OpGraph(**{field: data[key] for key, field in _GRAPH_FIELDS.items()})
        variables = VariableTable(**{field: data[key] for key, field in _VAR_FIELDS.items()})
        return Profile(graph=graph, duration_s=data["duration_s"], start_s=data["start_s"],
                       step_makespan_s=data["step_makespan_s"], step_wall_s=data["step_wall_s"],
                       batch_size=int(data["batch_size"]), variables=variables, meta=meta)
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        raise ProfileFormatError(path, f"inconsistent profile: {exc}") from None
