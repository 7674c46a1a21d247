"""The commands :mod:`fuzz` runs whole (``python bench/fuzz.py --commands``): their seed inputs, and
how one run's command line and input files are made from them.

A run of subcommand ``c`` is made from ``(seed, c, index)`` alone: a base command line that
works (a small, fast run on the bundled data), then 0 to 4 mutations drawn from:

- an input file mutated: a profile's members (values NaN, infinite, negative or huge, shapes,
  dtypes, Python objects, members dropped, meta_json mutated as JSON) or its bytes; a JSON file
  (cluster, run.json, variables.json, iperf3) mutated as JSON or as bytes; a CSV or TSV
  (measurements, step times, priorities) as text; a trace (RunMetadata, gzip'd) as bytes; a
  capture as bytes (record lengths, truncation, ...), as the reader campaign mutates them;
- an option's value replaced by one of its pool (valid small values, boundaries, values beyond
  the documented limits, malformed text);
- an option dropped, repeated, or added (an optional one of the command, or an unknown one);
- an output path replaced by another kind of path: ``-``, an existing file, a symbolic link to
  a file, a dangling link, a directory, a path under a regular file, missing directories,
  ``/dev/null``, or the path of another output.

Values are chosen so that every run that is valid stays small (a few seconds at most): the
campaign checks that bad input fails at once and cleanly, not how fast large runs go.

``collect`` runs with its launchers replaced by a stub that checks what it is given and
returns: everything up to starting TensorFlow processes (option values, ``TF_CONFIG`` and
``--cluster-spec``, the run configuration) is exercised, starting the tasks is not (that
needs TensorFlow, seconds per task, and root for the capture; tests/test_faults.py runs it).
``lab`` is not fuzzed: besides ``--preset``/``--only`` (argparse choices, checked names) it only
runs as root with TensorFlow and network namespaces.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import math
import random
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import fuzz_targets

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"

# -- value pools -------------------------------------------------------------------------------

INTS = ["0", "1", "2", "3", "7", "-1", "1.5", "abc", "", "1e3", "99999999999999999999", "2147483648", " 3", "0x10"]
STEPS = ["1", "2", "5", "20", "40", "0", "-5", "1000001", "abc", "", "99999999999", "3.0"]
WORKERS = ["1", "2", "1,2", "1-3", "2-4", "4", "1,,2", "3-1", "0", "1-1025", "1-100000", "-1", "abc", "", " 2",
           "1-", "1,2,2", "16", "1-2,2-3", "1 - 2", "2,1", "1025", "99999999999"]
RATES = ["1gbit", "100mbit", "10Gbps", "125MB/s", "1.25e8", "0", "-1gbit", "1kbit", "999bit", "100Tbit", "101Tbit",
         "1e400", "nan", "inf", "abc", "1 gbit", "", "1gbit/s", "1e-5gbit", "5mbit"]
FLOATS = ["0", "1", "2", "0.5", "-1", "nan", "inf", "-inf", "1e-9", "1e300", "abc", "", "0.01", "0.009", "100000",
          "100001", "0.05", "0.999", "1000", "1001"]
TRANSFERS = ["http2", "grpc", "fifo", "tic", "tac", "reverse", "random", "http2,fifo", "tic,tac", "priority",
             "bogus", "", ",", "random#3", "random#x", "tic#2", "http2,http2", "order", "grpc,order"]
SHARINGS = ["ps", "fcfs", "hybrid", "flow_cap", "ps,fcfs", "bogus", "", "ps,ps"]
MODES = ["async", "sync", "allreduce", "bogus", ""]
SEEDS = ["0", "1", "7", "-1", "4294967295", "4294967296", "abc", "1e3", ""]
JOBS = ["1", "2", "0", "-1", "256", "257", "abc", "3"]
SERVERS = ["1", "2", "3", "0", "256", "257", "abc", "-2"]
POLICIES = ["tic", "tac", "reverse_tic", "random", "bogus", ""]
PATH_KINDS = ("new", "-", "existing", "symlink", "dangling", "dir", "under_file", "missing_dirs", "/dev/null", "other")
DIR_KINDS = ("new", "existing", "symlink", "file", "-", "under_file", "missing_dirs", "stale")


@dataclasses.dataclass
class Run:
    """One run: its command line, the files it reads (relative paths in its directory), the outputs
    it may write (relative paths; a directory's files listed one by one), and a stub to apply."""

    argv: list[str]
    inputs: set[str]
    outputs: set[str]
    stub: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class CommandTarget:
    name: str
    make: Callable[[random.Random, Path], Run]


# -- seeds ------------------------------------------------------------------------------------

@cache
def profile_members(name: str = "tiny") -> dict:
    import numpy as np

    with np.load(DATA / "profiles" / f"{name}.npz", allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


@cache
def small_run_dir() -> Path:
    """The bundled tiny16_lo_smallwin run directory, reduced to its first traced step and the part
    of its capture up to shortly after it (what calibration needs, decoded in a fraction of the
    time): a calibrate seed."""
    target = Path(fuzz_targets.scratch_dir()) / "seed-run"
    source = DATA / "captures" / "tiny16_lo_smallwin"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("step_0000[1-9]*", "*.chrome.json.gz"))
    run = json.loads((target / "run.json").read_text())
    run["traced_steps"] = ["step_00000.pb.gz"]
    (target / "run.json").write_text(json.dumps(run, indent=2))
    capture = gzip.decompress((source / "capture.pcapng.gz").read_bytes())
    blocks = fuzz_targets.pcapng_boundaries(capture)
    cut = _shortest_capture(target, capture, blocks)
    (target / "capture.pcapng.gz").write_bytes(gzip.compress(capture[:cut], compresslevel=6, mtime=0))
    return target


def remove_seeds() -> None:
    """Remove the seed files this process made (the reduced run directory)."""
    if small_run_dir.cache_info().currsize:
        shutil.rmtree(small_run_dir().parent, ignore_errors=True)
        small_run_dir.cache_clear()


def _shortest_capture(run_dir: Path, capture: bytes, blocks: list[int]) -> int:
    """The shortest cut of the capture (at a block boundary, in tenths of it) that still calibrates."""
    import warnings

    from calibration.calibrate import calibrate_run

    for tenth in range(3, 11):
        cut = blocks[min(len(blocks) - 1, len(blocks) * tenth // 10)] if tenth < 10 else len(capture)
        (run_dir / "capture.pcapng.gz").write_bytes(gzip.compress(capture[:cut], compresslevel=1, mtime=0))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                calibrate_run(run_dir)
            return cut
        except Exception:
            continue
    return len(capture)


@cache
def priority_text() -> bytes:
    return fuzz_targets.priority_seeds()[0]


@cache
def measured_texts() -> tuple[bytes, ...]:
    return (b"workers,measured_eps\n1,1500\n2,2600\n3,3300\n",) + fuzz_targets.prediction_seeds()


@cache
def cluster_text() -> bytes:
    return (DATA / "clusters" / "lab-1gbit.json").read_bytes()


# -- mutating files ---------------------------------------------------------------------------

def _mutate_bytes(data: bytes, rng: random.Random, target=None) -> bytes:
    import mutations

    target = target or _plain_target()
    for _ in range(rng.choice((1, 1, 2, 3))):
        data = mutations.mutate(data, rng, target)
    return data


@cache
def _plain_target():
    return fuzz_targets.Target("file", list, lambda d, s: None, lambda: ())


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    import mutations

    if rng.random() < 0.75:
        out = data
        for _ in range(rng.choice((1, 1, 2))):
            try:
                out = mutations.mutate_json(out, rng)
            except RecursionError:  # nested too deeply to parse again: keep it as it is
                break
        return out
    return _mutate_bytes(data, rng)


def mutate_text(data: bytes, rng: random.Random) -> bytes:
    """A CSV/TSV: a field replaced by a value of the pools, a line dropped or repeated, or bytes."""
    roll = rng.random()
    lines = data.decode("utf-8", "replace").split("\n")
    if roll < 0.5 and len(lines) > 1:
        i = rng.randrange(len(lines))
        sep = "\t" if "\t" in lines[i] else ","
        fields = lines[i].split(sep)
        j = rng.randrange(len(fields))
        fields[j] = rng.choice(["", "-1", "nan", "inf", "-inf", "1e308", "0", "abc", "2", "1.5", "9" * 30,
                                "-0", "1e-320", " ", '"', "1,2"])
        lines[i] = sep.join(fields)
    elif roll < 0.7 and len(lines) > 1:
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, lines[i])
    else:
        return _mutate_bytes(data, rng)
    return "\n".join(lines).encode()


PROFILE_VALUES = (math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300, 1e6, 2.0 ** 40, 2.0 ** 62, 1e-300)


def _change_member(members: dict, name: str, rng: random.Random) -> None:
    import numpy as np

    value = members[name]
    roll = rng.random()
    if roll < 0.08:
        del members[name]
    elif roll < 0.16:
        members[name] = np.array([object()], dtype=object) if rng.random() < 0.3 else np.zeros((2, 2, 2))
    elif roll < 0.24:
        members[name] = value.astype(rng.choice(["f4", "i1", "u8", "i8", "U3", "bool", "f8"]))
    elif roll < 0.32 and value.ndim:
        members[name] = value[: rng.randrange(value.shape[0] + 1)]
    elif roll < 0.40:
        members[name] = np.concatenate([value.ravel(), value.ravel()[:3]]) if value.size else value
    elif name == "meta_json":
        members[name] = np.array(mutate_json(str(value).encode(), rng).decode("utf-8", "replace"))
    elif name == "format":
        members[name] = np.array(rng.choice(["tfsim.profile/2", "", "tfsim.profile/1 ", "x" * 300]))
    elif value.size and value.dtype.kind in "fiub":
        flat = value.astype("f8" if value.dtype.kind == "f" else value.dtype).ravel().copy()
        k = rng.randrange(flat.size)
        new = rng.choice(PROFILE_VALUES)
        if flat.dtype.kind == "f":
            flat[k] = new
        else:
            info = np.iinfo(flat.dtype) if flat.dtype.kind in "iu" else None
            flat[k] = (rng.choice([info.max, info.min, -1, 0, 2, 255, 10**6]) if info is not None
                       else not flat[k])
        members[name] = flat.reshape(value.shape).astype(value.dtype if value.dtype.kind != "f" else "f8")
    elif value.size and value.dtype.kind == "U":
        flat = value.ravel().copy()
        flat[rng.randrange(flat.size)] = rng.choice(["", "\t", "a\nb", "edge_1_x", str(flat[0])])
        members[name] = flat.reshape(value.shape)


def mutate_profile(rng: random.Random) -> bytes:
    """A profile whose members were changed (or whose archive bytes were)."""
    import numpy as np

    members = dict(profile_members())
    for _ in range(rng.choice((1, 1, 2, 3))):
        name = rng.choice(sorted(members))
        try:
            _change_member(members, name, rng)
        except (ValueError, TypeError, OverflowError):  # a change numpy cannot make: another time
            continue
    buffer = io.BytesIO()
    try:
        (np.savez_compressed if rng.random() < 0.8 else np.savez)(buffer, **members)
    except Exception:  # numpy refused to write it: fall back to mutated bytes
        return _mutate_bytes((DATA / "profiles" / "tiny.npz").read_bytes(), rng)
    data = buffer.getvalue()
    if rng.random() < 0.15:
        data = _mutate_bytes(data, rng)
    return data


def _gunzip(data: bytes) -> bytes:
    """``data`` decompressed, or as it is when it is not (or no longer) a whole gzip stream."""
    try:
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, ValueError):
        return data


def mutate_trace(data: bytes, rng: random.Random) -> bytes:
    raw = _gunzip(data)
    raw = _mutate_bytes(raw, rng)
    return gzip.compress(raw, compresslevel=1, mtime=0) if rng.random() < 0.8 else raw


def mutate_capture(data: bytes, rng: random.Random) -> bytes:
    import mutations

    raw = _gunzip(data)
    target = fuzz_targets.TARGETS["pcapng"]
    for _ in range(rng.choice((1, 1, 2))):
        raw = mutations.mutate(raw, rng, target)
    return mutations.compress(raw, rng)


def mutate_run_dir(directory: Path, rng: random.Random) -> None:
    """One file of a run directory mutated (or removed)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    path = rng.choice(files)
    roll = rng.random()
    if roll < 0.05:
        path.unlink()
        return
    data = path.read_bytes()
    if path.suffix == ".json":
        data = mutate_json(data, rng)
    elif path.suffix == ".csv":
        data = mutate_text(data, rng)
    elif path.name.startswith("capture"):
        data = mutate_capture(data, rng)
    else:
        data = mutate_trace(data, rng)
    path.write_bytes(data)


# -- command lines ----------------------------------------------------------------------------

class Line:
    """A command line being built: positionals and ``(option, value)`` pairs, with the kinds of
    the outputs among them."""

    def __init__(self, command: str, rng: random.Random, where: Path):
        self.command, self.rng, self.where = command, rng, where
        self.positionals: list[str] = []
        self.options: list[tuple[str, str | None]] = []
        self.output_options: dict[str, bool] = {}  # option -> binary?
        self.dir_options: dict[str, tuple[str, ...]] = {}  # option -> the files written in it
        self.pools: dict[str, list[str]] = {}
        self.optional: dict[str, list[str]] = {}
        self.inputs: set[str] = set()
        self.stub = None
        self.env: dict[str, str] = {}
        self.defaults: dict[str, tuple[str, tuple[str, ...]]] = {}  # an output directory's default when not given

    def opt(self, option: str, value: str | None = None, pool: list[str] | None = None) -> None:
        self.options.append((option, value))
        if pool is not None:
            self.pools[option] = pool

    def output(self, option: str, name: str, binary: bool = False) -> None:
        self.output_options[option] = binary
        self.options.append((option, name))

    def out_dir(self, option: str, name: str, files: tuple[str, ...]) -> None:
        self.dir_options[option] = files
        self.options.append((option, name))

    def write(self, name: str, data: bytes) -> str:
        path = self.where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.inputs.add(name)
        return name

    def copy_dir(self, source: Path, name: str) -> str:
        shutil.copytree(source, self.where / name)
        for path in (self.where / name).rglob("*"):
            if path.is_file():
                self.inputs.add(str(path.relative_to(self.where)))
        return name

    # the mutations of options -----------------------------------------------------------

    def mutate_options(self, count: int) -> None:
        rng = self.rng
        for _ in range(count):
            roll = rng.random()
            with_values = [i for i, (o, v) in enumerate(self.options) if o in self.pools]
            if roll < 0.45 and with_values:
                i = rng.choice(with_values)
                option = self.options[i][0]
                self.options[i] = (option, rng.choice(self.pools[option]))
            elif roll < 0.55 and self.options:
                del self.options[rng.randrange(len(self.options))]
            elif roll < 0.62 and self.options:
                self.options.append(self.options[rng.randrange(len(self.options))])
            elif roll < 0.80 and self.optional:
                option = rng.choice(sorted(self.optional))
                pool = self.optional[option]
                self.options.append((option, rng.choice(pool) if pool else None))
                if pool:
                    self.pools.setdefault(option, pool)
            elif roll < 0.83:
                self.options.append((rng.choice(["--bogus", "--work", "-x", "--jobs=2", "--"]), None))
            else:
                self.mutate_output()

    def mutate_output(self) -> None:
        rng = self.rng
        outs = [i for i, (o, _) in enumerate(self.options) if o in self.output_options or o in self.dir_options]
        if not outs:
            return
        i = rng.choice(outs)
        option, name = self.options[i]
        if option in self.dir_options:
            self.options[i] = (option, self._dir_of_kind(name, rng.choice(DIR_KINDS), self.dir_options[option]))
        else:
            self.options[i] = (option, self._path_of_kind(name, rng.choice(PATH_KINDS)))

    def _path_of_kind(self, name: str, kind: str) -> str:
        where = self.where
        name = Path(name).name if name not in ("-", "/dev/null", "") else "out.txt"
        if (where / name).exists() or (where / name).is_symlink():
            name = f"{self.rng.randrange(1000)}-{name}"
        if kind == "-":
            return "-"
        if kind == "/dev/null":
            return "/dev/null"
        if kind == "existing":
            self.write(name, b"old output\n")
        elif kind == "symlink":
            self.write("elsewhere/" + name, b"old target\n")
            (where / name).symlink_to(where / "elsewhere" / name)
            self.inputs.add(name)
        elif kind == "dangling":
            (where / name).symlink_to(where / "nowhere" / name)
            self.inputs.add(name)
        elif kind == "dir":
            (where / name).mkdir()
            self.write(name + "/keep", b"x")
        elif kind == "under_file":
            self.write("plain", b"x")
            return f"plain/{name}"
        elif kind == "missing_dirs":
            return f"a/b/{name}"
        elif kind == "other":
            others = [v for o, v in self.options if (o in self.output_options) and v and v != name]
            if others:
                return others[0]
        return name

    def _dir_of_kind(self, name: str, kind: str, files: tuple[str, ...]) -> str:
        where = self.where
        name = Path(name).name if name not in ("-", "") else "outdir"
        if (where / name).exists() or (where / name).is_symlink():
            name = f"{self.rng.randrange(1000)}-{name}"
        if kind == "-":
            return "-"
        if kind == "existing":
            (where / name).mkdir(exist_ok=True)
            self.write(f"{name}/unrelated.txt", b"x")
        elif kind == "stale":
            (where / name).mkdir(exist_ok=True)
            for file in files[:2]:
                self.write(f"{name}/{file}", b"stale\n")
            if len(files) > 2:
                self.write(f"elsewhere/{files[2]}", b"old target\n")
                (where / name / files[2]).symlink_to(where / "elsewhere" / files[2])
                self.inputs.add(f"{name}/{files[2]}")
        elif kind == "symlink":
            (where / f"real-{name}").mkdir(exist_ok=True)
            (where / name).symlink_to(where / f"real-{name}")
            self.inputs.add(name)
        elif kind == "file":
            self.write(name, b"not a directory\n")
        elif kind == "under_file":
            self.write("plain", b"x")
            return f"plain/{name}"
        elif kind == "missing_dirs":
            return f"a/b/{name}"
        return name

    def finish(self) -> Run:
        units = [[p] for p in self.positionals]
        for option, value in self.options:
            units.append([option] if value is None else [option, value])
        if self.rng.random() < 0.1:  # options (each with its value) in another order
            self.rng.shuffle(units)
        last = {unit[0]: unit[1] for unit in units if len(unit) == 2}  # argparse keeps an option's last value
        outputs: set[str] = set()
        for option, value in last.items():
            if option in self.output_options and value not in ("-", "/dev/null"):
                outputs.add(value)
            elif option in self.dir_options and value != "-":
                outputs.update(f"{value}/{f}" for f in self.dir_options[option])
        for option, (value, files) in self.defaults.items():
            if option not in last:
                outputs.update(f"{value}/{f}" for f in files)
        env = {k: v.replace("\0", "") for k, v in self.env.items()}  # an environment holds no NUL
        return Run([self.command, *(token for unit in units for token in unit)], set(self.inputs), outputs,
                   self.stub, env)


def _file_mutations(rng: random.Random) -> int:
    return rng.choice((0, 0, 0, 1, 1, 2))


def _option_mutations(rng: random.Random) -> int:
    return rng.choice((0, 1, 1, 1, 2, 2, 3))


def _profile_input(line: Line, name: str = "profile.npz") -> str:
    rng = line.rng
    if rng.random() < 0.35:
        return line.write(name, mutate_profile(rng))
    return line.write(name, (DATA / "profiles" / "tiny.npz").read_bytes())


def _cluster_input(line: Line) -> str:
    data = cluster_text()
    if line.rng.random() < 0.35:
        data = mutate_json(data, line.rng)
    return line.write("cluster.json", data)


def _network(line: Line) -> None:
    if line.rng.random() < 0.75:
        line.opt("--cluster", _cluster_input(line))
    else:
        line.opt("--bandwidth", line.rng.choice(["1gbit", "100mbit"]), RATES)


def make_predict(rng: random.Random, where: Path) -> Run:
    line = Line("predict", rng, where)
    line.positionals.append(_profile_input(line))
    _network(line)
    line.opt("--workers", rng.choice(["1-3", "1,2", "2"]), WORKERS)
    line.opt("--steps", rng.choice(["30", "40"]), STEPS)
    line.opt("--warmup", "5", INTS)
    line.opt("--jobs", rng.choice(["1", "2"]), JOBS)
    line.opt("--no-progress")
    line.optional = {"--transfer": TRANSFERS, "--sharing": SHARINGS, "--mode": MODES, "--seed": SEEDS,
                     "--ps": SERVERS, "--cores": FLOATS, "--stagger": FLOATS, "--ci-target": FLOATS,
                     "--flow-cap": RATES, "--trace-workers": INTS, "--trace-steps": INTS, "--bandwidth": RATES}
    if rng.random() < 0.3:
        text = priority_text() if rng.random() < 0.7 else mutate_text(priority_text(), rng)
        line.opt("--priorities", "order=" + line.write("order.tsv", text))
        line.opt("--transfer", rng.choice(["order", "order,http2"]), TRANSFERS)
    for option, name, binary in (("--json", "p.json", False), ("--csv", "p.csv", False), ("--plot", "p.png", True),
                                 ("--trace-out", "t.json", False)):
        if rng.random() < 0.5:
            line.output(option, name, binary)
    line.mutate_options(_option_mutations(rng))
    return line.finish()


def _measured_input(line: Line) -> str:
    data = line.rng.choice(measured_texts())
    if line.rng.random() < 0.4:
        data = mutate_text(data, line.rng)
    return line.write("lab.csv", data)


def make_compare(rng: random.Random, where: Path) -> Run:
    line = Line("compare", rng, where)
    line.positionals.append(_profile_input(line))
    _network(line)
    line.opt("--workers", rng.choice(["1-3", "1,2"]), WORKERS)
    line.opt("--steps", rng.choice(["30", "40"]), STEPS)
    line.opt("--jobs", rng.choice(["1", "2"]), JOBS)
    line.opt("--no-progress")
    line.optional = {"--mode": MODES, "--cores": FLOATS, "--setting": ["1gbit", "100mbit", "none", ""],
                     "--bandwidth": RATES}
    if rng.random() < 0.5:
        line.opt("--measured", _measured_input(line))
        if rng.random() < 0.5:
            line.opt("--setting", "1gbit", ["1gbit", "100mbit", "none", ""])
    for option, name, binary in (("--json", "c.json", False), ("--csv", "c.csv", False), ("--plot", "c.png", True)):
        if rng.random() < 0.5:
            line.output(option, name, binary)
    line.mutate_options(_option_mutations(rng))
    return line.finish()


REPORT_FILES = ("report.json", "prediction.json", "prediction.csv", "comparison.csv", "baselines.csv",
                "orderings.csv", "report.html")


def make_report(rng: random.Random, where: Path) -> Run:
    line = Line("report", rng, where)
    line.positionals.append(_profile_input(line))
    _network(line)
    line.opt("--workers", rng.choice(["1,2", "1-3"]), WORKERS)
    line.opt("--steps", "30", STEPS)
    line.opt("--warmup", "5", INTS)
    line.opt("--jobs", rng.choice(["1", "2"]), JOBS)
    line.opt("--no-progress")
    line.optional = {"--mode": MODES, "--cores": FLOATS, "--seed": SEEDS, "--gantt-workers": INTS,
                     "--setting": ["1gbit", "none"], "--bandwidth": RATES}
    if rng.random() < 0.4:
        line.opt("--measured", _measured_input(line))
    if rng.random() < 0.3:
        plots = line.copy_dir(DATA / "clusters" / "lab-1gbit-plots", "plots")
        if rng.random() < 0.3:
            target = rng.choice(sorted((where / plots).iterdir()))
            target.write_bytes(_mutate_bytes(target.read_bytes(), rng))
        line.opt("--cluster-plots", plots, ["plots", "missing", "lab.csv", ""])
    line.out_dir("--out", "out", REPORT_FILES)
    line.mutate_options(_option_mutations(rng))
    return line.finish()


DEMO_FILES = REPORT_FILES + ("profiles.csv", "throughput.png", "baselines.png", "findings.txt", "demo.json")


def make_demo(rng: random.Random, where: Path) -> Run:
    line = Line("demo", rng, where)
    line.write("data/profiles/tiny.npz", mutate_profile(rng) if rng.random() < 0.3
               else (DATA / "profiles" / "tiny.npz").read_bytes())
    if rng.random() < 0.3:
        line.write("data/profiles/resnet50.npz", mutate_profile(rng))
    if rng.random() < 0.8:
        data = cluster_text()
        line.write("data/clusters/c-1gbit.json", mutate_json(data, rng) if rng.random() < 0.3 else data)
    line.opt("--data", "data", ["data", "missing", ""])
    line.opt("--steps", rng.choice(["10", "20"]), STEPS)
    line.opt("--jobs", rng.choice(["1", "2"]), JOBS)
    line.out_dir("--out", "demo", DEMO_FILES)
    line.defaults["--out"] = ("tfsim-demo", DEMO_FILES)
    line.mutate_options(rng.choice((0, 1, 1, 2)))
    return line.finish()


def _run_dir_input(line: Line, source: Path) -> str:
    name = line.copy_dir(source, "run")
    for _ in range(_file_mutations(line.rng) + (1 if line.rng.random() < 0.3 else 0)):
        mutate_run_dir(line.where / name, line.rng)
    return name


def make_profile(rng: random.Random, where: Path) -> Run:
    line = Line("profile", rng, where)
    roll = rng.random()
    if roll < 0.2:  # summarise a profile
        line.positionals.append(_profile_input(line))
        line.opt("--summary")
        if rng.random() < 0.5:
            line.opt("--json")
    elif roll < 0.4:  # trace files outside a run directory
        run = small_run_dir()
        trace = (run / "trace" / "step_00000.pb.gz").read_bytes()
        line.positionals.append(line.write("step_00000.pb.gz", mutate_trace(trace, rng) if rng.random() < 0.5
                                           else trace))
        line.opt("--batch", "32", INTS)
        if rng.random() < 0.6:
            variables = (run / "variables.json").read_bytes()
            line.opt("--variables", line.write("variables.json", mutate_json(variables, rng)
                                               if rng.random() < 0.3 else variables))
        line.output("-o", "p.npz", True)
    else:
        line.positionals.append(_run_dir_input(line, small_run_dir()))
        line.output("-o", "p.npz", True)
    line.optional = {"--batch": INTS, "--json": [], "--summary": []}
    line.mutate_options(_option_mutations(rng))
    return line.finish()


def make_order(rng: random.Random, where: Path) -> Run:
    line = Line("order", rng, where)
    line.positionals.append(_profile_input(line))
    line.opt("--policy", rng.choice(["tic", "tac", "reverse_tic", "random"]), POLICIES)
    line.output("-o", "order.tsv")
    line.optional = {"--json": [], "--bandwidth": ["1.25e8", "0", "-1", "nan", "inf", "1e-300", "abc", "1e300"],
                     "--seed": SEEDS}
    line.mutate_options(_option_mutations(rng))
    return line.finish()


def make_calibrate(rng: random.Random, where: Path) -> Run:
    line = Line("calibrate", rng, where)
    line.positionals.append(_run_dir_input(line, small_run_dir()))
    line.output("-o", "cluster.json")
    if rng.random() < 0.4:
        line.out_dir("--plots", "plots", ("overhead.png", "streams.png"))
    line.optional = {"--json": [], "--backend": ["scapy", "tshark", "pyshark"] if rng.random() < 0.05
                     else ["scapy", "pyshark"]}
    line.mutate_options(_option_mutations(rng))
    return line.finish()


TF_CONFIG = {"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}, "task": {"type": "worker",
                                                                                           "index": 0}}


def make_collect(rng: random.Random, where: Path) -> Run:
    line = Line("collect", rng, where)
    line.stub = "collect"
    line.opt("--model", rng.choice(["tiny", "resnet50"]), ["tiny", "alexnet", "bogus", "", "wide_mlp"])
    line.opt("--steps", "3", STEPS)
    line.opt("--warmup", "1", INTS)
    line.opt("--batch", "4", INTS)
    line.opt("--no-progress")
    line.opt("--out", "run", ["run", "", "-", "plain/run"])  # the stub writes no run directory
    line.optional = {"--trace-every": INTS, "--workers": INTS, "--ps-tasks": INTS, "--image-size": INTS,
                     "--num-classes": INTS, "--timeout": FLOATS, "--placement": ["greedy", "round_robin", "x"],
                     "--model-fn": ["mod:fn", "nocolon", ""], "--intra-op-threads": INTS,
                     "--inter-op-threads": INTS, "--grpc-options": ["a=1", ""], "--force": [],
                     "--role": ["ps", "worker", "chief"], "--task-index": INTS, "--connect-timeout": FLOATS,
                     "--iperf": [], "--iperf-server": [], "--iperf-port": INTS, "--iperf-repeats": INTS,
                     "--iperf-seconds": FLOATS, "--capture-interface": ["lo", "", "nosuch0"]}
    if rng.random() < 0.4:
        spec = json.dumps(TF_CONFIG).encode()
        if rng.random() < 0.6:
            spec = mutate_json(spec, rng)
        if rng.random() < 0.5:
            line.opt("--cluster-spec", line.write("cluster_spec.json", spec))
        else:
            line.env["TF_CONFIG"] = spec.decode("utf-8", "replace")
    line.mutate_options(_option_mutations(rng))
    return line.finish()


COMMAND_TARGETS: dict[str, CommandTarget] = {t.name: t for t in (
    CommandTarget("predict", make_predict),
    CommandTarget("compare", make_compare),
    CommandTarget("report", make_report),
    CommandTarget("profile", make_profile),
    CommandTarget("calibrate", make_calibrate),
    CommandTarget("order", make_order),
    CommandTarget("demo", make_demo),
    CommandTarget("collect", make_collect),
)}


# -- the collect stub -------------------------------------------------------------------------

def install_stub(name: str | None) -> None:
    """Replace what would start TensorFlow processes by a check that returns (in the run's child)."""
    if name != "collect":
        return
    from tfprofile.harness import launcher, role

    def fake_collect(config, **kwargs):
        assert isinstance(config, launcher.CollectConfig)
        out = config.out_dir
        if out.exists() and not kwargs.get("overwrite"):
            from tfbase.errors import UsageError

            raise UsageError(out, "already exists; choose another --out or pass --force")
        return out

    def fake_run_task(config, role_options, **kwargs):
        assert isinstance(config, launcher.CollectConfig)
        return None

    launcher.collect = fake_collect
    role.run_task = fake_run_task
