"""Small things several test files use: a two-type instance catalogue for ``tfsim plan`` and a
process-liveness check for the signal tests."""

# Two instance types (docs/model.md §11.1): a slow cheap one and a fast dear one with faster hosts.
CATALOGUE = """\
[[type]]
name = "small"
price = 0.40
link = "1gbit"

[[type]]
name = "fast"
price = 1.10
link = "10gbit"
compute_scale = 0.5
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it has exited and only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
