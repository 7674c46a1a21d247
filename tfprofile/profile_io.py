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


MAX_PROFILE_BYTES = 256 * 2**20  # what the arrays of a profile may expand to, all members together
MAX_MEMBERS = 64


def _check_archive(path: Path) -> None:
    """Refuse, before numpy allocates anything, an archive that is not a profile as tfsim writes
    it or that would expand beyond :data:`MAX_PROFILE_BYTES`: each member must be stored or
    deflated, a ``.npy`` array of plain (not object) data whose header declares exactly the bytes
    the member holds, and the members together at most the limit."""
    with open(path, "rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            raise ProfileFormatError(path, "not a tfsim profile: not an .npz (zip) archive")
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise ProfileFormatError(path, f"not a tfsim profile: {len(members)} members (a profile has "
                                           f"{len(_GRAPH_FIELDS) + len(_VAR_FIELDS) + 7})")
        total = 0
        for member in members:
            name = member.filename
            if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ProfileFormatError(path, f"member {name!r} uses compression method {member.compress_type}; "
                                               "profiles are stored or deflated")
            total += member.file_size
            if total > MAX_PROFILE_BYTES:
                raise ProfileFormatError(path, f"expands to more than {MAX_PROFILE_BYTES // 2**20} MiB, the limit of "
                                               "a profile")
            if not name.endswith(".npy"):
                continue
            with archive.open(member) as stream:
                try:
                    version = np.lib.format.read_magic(stream)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
                    else:
                        raise ValueError(f"npy format version {version}")
                except (ValueError, SyntaxError, EOFError, tokenize.TokenError, TypeError) as exc:
                    raise ProfileFormatError(path, f"member {name!r} is not a numpy array ({exc})") from None
                if dtype.hasobject:
                    raise ProfileFormatError(path, f"member {name!r} holds Python objects: a profile holds plain "
                                                   "arrays and is never unpickled")
                declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if declared != member.file_size - stream.tell():
                    raise ProfileFormatError(path, f"member {name!r} declares {declared:,} bytes of data but holds "
                                                   f"{member.file_size - stream.tell():,}")


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
        _check_archive(path)
        with np.load(path, allow_pickle=False) as archive:
            if "format" not in archive.files:
                raise ProfileFormatError(path, "not a tfsim profile (no format member)")
            fmt = str(archive["format"])
            if fmt != PROFILE_FORMAT:
                raise ProfileFormatError(path, f"format {fmt[:60]!r} is not supported; this tfsim reads "
                                               f"{PROFILE_FORMAT!r}")
            missing = [k for k in (*_GRAPH_FIELDS, *_VAR_FIELDS, "meta_json", "batch_size", "duration_s", "start_s",
                                   "step_makespan_s", "step_wall_s") if k not in archive.files]
            if missing:
                raise ProfileFormatError(path, f"profile lacks {', '.join(missing)}")
            data = {k: archive[k] for k in archive.files}
    except FileNotFoundError:
        raise ProfileFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise ProfileFormatError(path, "is a directory, not a profile (.npz)") from None
    except ProfileFormatError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error, NotImplementedError,
            tokenize.TokenError, SyntaxError, TypeError, OverflowError) as exc:
        # NotImplementedError: a zip member compressed with a method zipfile does not know;
        # TokenError: an array header numpy cannot tokenize
        raise ProfileFormatError(path, f"not a tfsim profile (.npz) or corrupt ({_short(exc)})") from None
    except MemoryError:  # an array larger than this process may allocate
        raise ProfileFormatError(path, "corrupt: an array is larger than memory") from None
    try:
        meta = json.loads(str(data["meta_json"]))
        if not isinstance(meta, dict):
            raise ValueError("meta_json is not a JSON object")
        graph = OpGraph(**{field: data[key] for key, field in _GRAPH_FIELDS.items()})
        if graph.n_ops == 0:
            raise ValueError("it has no ops")
        variables = VariableTable(**{field: data[key] for key, field in _VAR_FIELDS.items()})
        batch = data["batch_size"]
        if batch.shape != () or batch.dtype.kind not in "iu":
            raise ValueError(f"batch_size must be one integer, not {batch.dtype} of shape {batch.shape}")
        profile = Profile(graph=graph, duration_s=data["duration_s"], start_s=data["start_s"],
                          step_makespan_s=data["step_makespan_s"], step_wall_s=data["step_wall_s"],
                          batch_size=int(batch), variables=variables, meta=meta)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ProfileFormatError(path, f"inconsistent profile: {_short(exc)}") from None
    _check_servers(path, profile)
    return profile


def _check_servers(path: Path, profile: Profile) -> None:
    """Every server index within the parameter servers the profile's run had (when it says)."""
    cluster = profile.meta.get("cluster")
    ps = cluster.get("ps") if isinstance(cluster, dict) else None
    if not isinstance(ps, list) or not ps:
        return
    used = [int(profile.graph.server.max()) if profile.graph.n_ops else -1,
            int(profile.variables.server.max()) if len(profile.variables) else -1]
    if max(used) >= len(ps):
        raise ProfileFormatError(path, f"inconsistent profile: server {max(used)} is used, but its run had "
                                       f"{len(ps)} parameter server{'s' if len(ps) != 1 else ''}")


def _short(exc: BaseException) -> str:
    """An exception's message in one short line, without numpy's advice on unsafe loading."""
    text = " ".join(str(exc).split())
    if "allow_pickle" in text:
        return "it holds Python objects, which a profile never does"
    return text[:200]
