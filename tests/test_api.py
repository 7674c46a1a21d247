"""The Python API as a notebook user meets it: every public example runs, any number of times, in any
order of imports, and errors are the project's own exceptions naming the parameter."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tfbase", "tfprofile", "netcapture", "calibration", "simulate", "tfsim")
# Modules that import TensorFlow when imported, or run a program.
NOT_IMPORTABLE_HERE = ("tfprofile.harness.task", "tfprofile.harness.zoo", "tfsim.__main__")


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch):
    # The examples use the bundled data by relative path, as a user in a checkout would.
    monkeypatch.chdir(ROOT)


def _modules():
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if info.name not in NOT_IMPORTABLE_HERE:
                yield info.name


def test_every_docstring_example_runs():
    attempted = 0
    for name in _modules():
        result = doctest.testmod(importlib.import_module(name), report=True,
                                 optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
        attempted += result.attempted
    assert attempted >= 25  # the public API's examples are there (predict, profiles, TicTac, calibration)


@pytest.mark.parametrize("public", ["simulate.predict", "tfprofile.read_profile", "tfprofile.load_profile",
                                    "calibration.calibrate_run", "tfprofile.tictac.tic", "tfprofile.tictac.tac"])
def test_the_public_api_has_numpydoc_examples(public):
    module, _, name = public.rpartition(".")
    doc = getattr(importlib.import_module(module), name).__doc__
    assert "Examples\n    --------" in doc and ">>> " in doc


def test_the_notebook_page_runs():
    result = doctest.testfile(str(ROOT / "docs" / "notebook.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 10


def _readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_python_section_runs_twice_in_one_process():
    blocks = _readme_python_blocks()
    assert blocks, "the README's Python API section has no python block"
    code = "\n".join(blocks)
    script = f"import warnings\nwarnings.simplefilter('ignore')\nfor _ in range(2):\n{textwrap.indent(code, '    ')}"
    done = subprocess.run([sys.executable, "-c", script + "\nprint('ok')"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


# Each snippet imports the packages in another order, then calls the API twice.
IMPORT_ORDERS = [
    "import tfprofile, simulate",
    "import simulate.sweep\nimport simulate\nimport tfprofile",
    "from simulate import predict\nimport simulate\nimport tfprofile\nimport simulate.sweep",
    "import simulate.coarse, simulate.orderings, simulate.cluster_file\nimport tfprofile.api, tfprofile.summary\n"
    "import simulate, tfprofile",
]


@pytest.mark.parametrize("imports", IMPORT_ORDERS)
def test_the_api_works_twice_whatever_the_import_order(imports):
    script = imports + textwrap.dedent("""
        import warnings
        warnings.simplefilter("ignore")
        p = tfprofile.load_profile("data/profiles/tiny.npz")
        for _ in range(2):
            table = simulate.predict(p, bandwidth_Bps=125e6, workers="1-2", steps=100)
            assert list(table["workers"]) == [1, 2], table
            assert callable(simulate.predict) and callable(simulate.baselines) and callable(tfprofile.load_profile)
            simulate.baselines(p, simulate.load_cluster("data/clusters/lab-1gbit.json"), [1, 2])
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_no_public_name_is_a_submodule_name():
    for name in ("simulate", "tfprofile", "calibration"):
        package = importlib.import_module(name)
        for public in package.__all__:
            assert importlib.util.find_spec(f"{name}.{public}") is None, f"{name}.{public} is also a submodule"


@pytest.mark.filterwarnings("ignore::tfbase.errors.TfsimWarning")
def test_api_errors_are_project_exceptions_naming_the_parameter():
    import simulate
    import tfprofile
    from tfbase.errors import InputError, ProfileFormatError, UsageError

    profile = tfprofile.load_profile("data/profiles/tiny.npz")
    cases = [
        (lambda: simulate.predict(profile, bandwidth_Bps=1e8, workers=0), UsageError, "workers"),
        (lambda: simulate.predict(profile, bandwidth_Bps=1e8, steps=10, warmup=20), UsageError, "warmup"),
        (lambda: simulate.predict(profile, bandwidth_Bps=1e8, transfer="bogus"), UsageError, "transfer"),
        (lambda: simulate.predict(profile, bandwidth_Bps=1e8, sharing="flow_cap"), UsageError, "flow_cap_Bps"),
        (lambda: simulate.predict(profile), UsageError, "cluster"),
        (lambda: simulate.predict(profile, bandwidth_Bps=-1.0), UsageError, "downlink_Bps"),
        (lambda: tfprofile.read_profile(["data/raw/tiny_step.pb"]), UsageError, "batch_size"),
        (lambda: tfprofile.load_profile("no/such.npz"), ProfileFormatError, "no/such.npz"),
    ]
    for call, kind, source in cases:
        with pytest.raises(kind) as caught:
            call()
        assert isinstance(caught.value, InputError)
        assert caught.value.source == source
        assert "--" not in str(caught.value), f"the API speaks of an option: {caught.value}"
