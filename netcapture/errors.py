"""Exception and warning types of :mod:`netcapture`.

They follow :mod:`tfbase.errors`: every problem with a user's file is an
:class:`~tfbase.errors.InputError` whose one-line message starts with the file.

As in dpkt, *incomplete* input and *malformed* input are different types, because a
caller treats them differently: incomplete input (a file cut short, a frame still
waiting for bytes) may become valid with more data, malformed input never will.

- :class:`TruncatedCapture`: the capture file ends inside a record (incomplete).
- :class:`MalformedCapture`: the file is not a pcap/pcapng capture, or a record is
  impossible (malformed); :class:`CorruptTail` when valid packets came before the damage
  (decoders keep them, as for a truncated file).
- :class:`NeedMoreData`: a parser was handed the first part of a frame or message
  (incomplete; internal, never reaches a user).
- :class:`MalformedFrame`: an HTTP/2 frame, header block or gRPC message that breaks
  its protocol (malformed).
"""

from __future__ import annotations

from tfbase.errors import InputError, TfsimWarning


class CaptureError(InputError):
    """A capture (pcap, pcapng) that cannot be used for what was asked."""


class TruncatedCapture(CaptureError):
    """The capture file ends in the middle of a record: more data was expected."""


class MalformedCapture(CaptureError):
    """Not a capture file, an unsupported variant, or a record that cannot be right."""


class CorruptTail(MalformedCapture):
    """Readable packets, then bytes that are no packet (garbage appended, a record overwritten):
    the packets before them can be used, as with a file cut short."""


class SnaplenError(CaptureError):
    """Packets were cut by the capture's snapshot length, so TCP payload is missing."""


class NoHttp2Error(CaptureError):
    """The capture holds no HTTP/2 connection that can be decoded from its start."""


class MalformedFrame(CaptureError):
    """An HTTP/2 frame, HPACK header block or gRPC message that violates its protocol."""


class TsharkError(CaptureError):
    """tshark is missing, too old, or failed on the capture."""



class IperfError(InputError):
    """An ``iperf3 -J`` output that cannot be read, or that reports a failed test."""


class NeedMoreData(Exception):
    """A parser needs more bytes than it was given (incomplete, not malformed).

    Internal: the streaming parsers catch it and wait for the next TCP segment.
    """


class CaptureWarning(TfsimWarning):
    """A defect of a capture that costs some records, not the whole capture."""
