"""Shared fixtures: the bundled real data."""

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
BUNDLED_MODELS = ("tiny", "alexnet", "vgg11", "resnet50", "inception3")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def bundled_profile():
    """``bundled_profile(name)`` -> the Profile in data/profiles/<name>.npz (loaded once)."""
    from tfprofile.profile_io import load_profile

    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = load_profile(DATA / "profiles" / f"{name}.npz")
        return cache[name]

    return load
