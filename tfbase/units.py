"""Parsing rates and sizes the way network people write them."""

from __future__ import annotations

import math
import re

from tfbase.errors import UsageError

MIN_RATE_BPS = 125.0  # 1 kbit/s
MAX_RATE_BPS = 1.25e13  # 100 Tbit/s
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z/]*)\s*$")
_BIT_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
_BYTE_UNITS = {"": 1, "b/s": 1, "bps_bytes": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "kib/s": 1024,
               "mib/s": 1024 ** 2, "gib/s": 1024 ** 3}


def parse_rate(text: str, parameter: str = "bandwidth") -> float:
    """``"1gbit"``, ``"100mbit"``, ``"10Gbps"`` (bits/s) or ``"125MB/s"``, ``"1.25e8"`` (bytes/s) -> bytes/s."""
    match = _RATE.match(str(text))
    if not match:
        raise UsageError(parameter, f"{text!r} is not a rate like 1gbit, 100mbit or 125MB/s")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit in _BIT_UNITS:
        rate = value * _BIT_UNITS[unit] / 8
    elif unit in _BYTE_UNITS:
        rate = value * _BYTE_UNITS[unit]
    else:
        raise UsageError(parameter, f"unknown unit {match.group(2)!r} in {text!r}; use bit/kbit/mbit/gbit or B/s, MB/s")
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(parameter, f"bandwidth must be positive and finite, not {text!r}")
    if not MIN_RATE_BPS <= rate <= MAX_RATE_BPS:
        raise UsageError(parameter, f"{text!r} is outside the rates tfsim simulates (1kbit to 100Tbit per second)")
    return rate


def format_rate(bytes_per_s: float) -> str:
    """Bytes/s as the bit rate people quote for links: ``1.00 Gbit/s``."""
    bits = bytes_per_s * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.3g} bit/s"


_DURATION = re.compile(r"^\s*([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf|infinity))\s*([a-zA-Zµ]*)\s*$",
                       re.IGNORECASE)
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str, parameter: str) -> float:
    """``"5ms"``, ``"250us"``, ``"0.01s"`` or ``"0"`` -> seconds (a finite, non-negative
    number); a UsageError naming ``parameter`` otherwise.

    Examples
    --------
    >>> parse_duration("5ms", "latency_s")
    0.005
    >>> parse_duration("0", "latency_s")
    0.0
    """
    match = _DURATION.match(str(text))
    if not match:
        raise UsageError(parameter, f"{text!r} is not a time like 5ms, 250us or 0.01s")
    value, unit = float(match.group(1)), match.group(2).lower()
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(parameter, f"must be finite and non-negative, not {text.strip()!r}")
    if not unit and value != 0:
        raise UsageError(parameter, f"{text!r} needs a unit: s, ms, us or ns")
    if unit and unit not in _TIME_UNITS:
        raise UsageError(parameter, f"unknown unit {match.group(2)!r} in {text!r}; use s, ms, us or ns")
    return value * _TIME_UNITS.get(unit, 1.0) + 0.0  # + 0.0: -0 is 0


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}
MAX_SIZE_BYTES = 1 << 40  # 1 TiB: beyond any buffer or message this tool reasons about


def parse_size(text: str, parameter: str) -> int:
    """``"160kb"``, ``"2MiB"``, ``"65536"`` -> bytes (a positive whole number); a UsageError
    naming ``parameter`` otherwise.

    Examples
    --------
    >>> parse_size("160kb", "buffer_bytes")
    160000
    >>> parse_size("2MiB", "buffer_bytes")
    2097152
    """
    match = _SIZE.match(str(text))
    if not match:
        raise UsageError(parameter, f"{text!r} is not a size like 160kb, 2mb or 65536")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _SIZE_UNITS:
        raise UsageError(parameter, f"unknown unit {match.group(2)!r} in {text!r}; use b, kb, mb, gb, kib, mib or gib")
    size = value * _SIZE_UNITS[unit]
    if not (math.isfinite(size) and 1 <= size <= MAX_SIZE_BYTES):
        raise UsageError(parameter, f"must be between 1 byte and 1 TiB, not {text!r}")
    return round(size)
