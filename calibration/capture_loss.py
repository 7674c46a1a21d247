"""What a damaged capture cost each link direction, and whether calibration may use it.

A capture from a real cluster loses packets (tcpdump drops them under load), starts after
connections opened, or ends inside one. :mod:`netcapture` decodes around the damage and
records, per direction of each connection, the bytes decoded, lost and skipped
(:class:`netcapture.DirectionLoss`). Here those records become the two link directions of
the calibrated cluster: bytes the parameter server sends are the *downlink*, bytes it
receives the *uplink* (docs/calibration.md §8).

A direction that lost more than :data:`MAX_LOSS_FRACTION` of its bytes is not calibrated
from, unless the caller accepts the loss (``allow_loss``): its streams, windows and busy
rate would describe a different run. Streams that lost frames are left out of every fit
either way, and CLUSTER.json says how many.
"""

from __future__ import annotations

import dataclasses
import os

from tfbase.errors import InputError

MAX_LOSS_FRACTION = 0.01  # of a direction's bytes: above this, calibrate refuses the capture
DIRECTIONS = ("downlink", "uplink")


class CaptureLossError(InputError):
    """A capture whose loss in one direction is above :data:`MAX_LOSS_FRACTION`.

    ``direction`` and ``loss`` say which and how much; the message names the capture file.
    """

    def __init__(self, source: str | os.PathLike | None, problem: str, direction: str = "",
                 loss: LinkLoss | None = None):
        super().__init__(source, problem)
        self.direction, self.loss = direction, loss

    def __reduce__(self):
        return (type(self), (self.source, self.problem, self.direction, self.loss))


@dataclasses.dataclass(frozen=True)
class LinkLoss:
    """One link direction's share of a capture's damage (sums over its connections)."""

    direction: str
    decoded_bytes: int = 0
    lost_bytes: int = 0       # never captured
    skipped_bytes: int = 0    # captured, not decodable
    unfinished_bytes: int = 0  # frames the capture ended inside: not a loss
    gaps: int = 0
    streams_decoded: int = 0  # RecvTensor streams carrying this direction's tensors, intact
    streams_excluded: int = 0  # ... and those that lost frames: left out of the fits

    @property
    def lost_fraction(self) -> float:
        total = self.decoded_bytes + self.lost_bytes + self.skipped_bytes + self.unfinished_bytes
        return (self.lost_bytes + self.skipped_bytes) / total if total else 0.0

    def to_json(self) -> dict:
        return {"decoded_bytes": self.decoded_bytes, "lost_bytes": self.lost_bytes,
                "skipped_bytes": self.skipped_bytes, "unfinished_bytes": self.unfinished_bytes,
                "lost_fraction": round(self.lost_fraction, 6),
                "tcp_gaps": self.gaps, "streams_decoded": self.streams_decoded,
                "streams_excluded": self.streams_excluded}

    def describe(self) -> str:
        return (f"{100 * self.lost_fraction:.2f}% of its bytes ({self.lost_bytes} never captured, "
                f"{self.skipped_bytes} not decodable; {self.streams_excluded} of "
                f"{self.streams_decoded + self.streams_excluded} tensor streams excluded)")


def _ps_sends(server_role: str, from_client: bool) -> bool | None:
    """Whether bytes one side sends come from the parameter server (None: not a PS/worker link)."""
    if server_role.startswith("ps"):
        return not from_client
    if server_role.startswith("worker"):
        return from_client
    return None


def link_losses(capture, roles_by_port: dict[int, str]) -> dict[str, LinkLoss]:
    """Sum ``capture.losses`` and its damaged RecvTensor streams into the two link directions.

    ``roles_by_port``: each task's gRPC port and its role (``"ps0"``, ``"worker0"``).

    >>> link_losses(type("C", (), {"losses": (), "streams": ()})(), {})["downlink"].lost_fraction
    0.0
    """
    sums = {d: dict(decoded_bytes=0, lost_bytes=0, skipped_bytes=0, unfinished_bytes=0, gaps=0, streams_decoded=0,
                    streams_excluded=0) for d in DIRECTIONS}
    for loss in capture.losses:
        ps_sends = _ps_sends(roles_by_port.get(loss.connection.server_port, ""), loss.from_client)
        if ps_sends is None:
            continue
        into = sums["downlink" if ps_sends else "uplink"]
        into["decoded_bytes"] += loss.decoded_bytes
        into["lost_bytes"] += loss.lost_bytes
        into["skipped_bytes"] += loss.skipped_bytes
        into["unfinished_bytes"] += loss.unfinished_bytes
        into["gaps"] += loss.gaps
    for stream in capture.streams:
        if not stream.is_recv_tensor:
            continue
        ps_sends = _ps_sends(roles_by_port.get(stream.connection.server_port, ""), from_client=False)
        if ps_sends is None:
            continue
        sums["downlink" if ps_sends else "uplink"]["streams_excluded" if stream.damaged else "streams_decoded"] += 1
    return {d: LinkLoss(d, **values) for d, values in sums.items()}


def check_loss(losses: dict[str, LinkLoss], capture_path: str | os.PathLike, allow_loss: bool) -> None:
    """Raise :class:`CaptureLossError` for the first direction above :data:`MAX_LOSS_FRACTION`,
    unless ``allow_loss``."""
    if allow_loss:
        return
    for direction in DIRECTIONS:
        loss = losses[direction]
        if loss.lost_fraction > MAX_LOSS_FRACTION:
            raise CaptureLossError(
                capture_path, f"the {direction} lost {loss.describe()}, more than the "
                f"{100 * MAX_LOSS_FRACTION:g}% a calibration accepts: capture again with a larger buffer "
                "(tcpdump -B), or accept the loss (allow_loss)", direction, loss)
