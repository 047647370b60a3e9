"""How long an SMS is: its encoding, its length in that encoding, and how many parts it costs.

A text that fits the GSM 03.38 alphabet travels in 7-bit units (160 in one part, 153 per
part of a longer message, characters of the extension table taking two units); anything
else forces UCS-2 (70 in one part, 67 per part, characters beyond the BMP taking two).
A unit pair is never split across parts, as handsets would not reassemble it.
"""

from __future__ import annotations

from dataclasses import dataclass

GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
GSM7_EXTENSION = frozenset("\f^{}\\[~]|€")

# encoding → (units in a single-part message, units per part of a multi-part one)
LIMITS = {"GSM-7": (160, 153), "UCS-2": (70, 67)}


@dataclass(frozen=True)
class SmsLength:
    encoding: str
    length: int  # in the encoding's units: GSM-7 septets or UTF-16 code units
    segments: int


def measure(text: str) -> SmsLength:
    if all(char in GSM7_BASIC or char in GSM7_EXTENSION for char in text):
        encoding, units = "GSM-7", [2 if char in GSM7_EXTENSION else 1 for char in text]
    else:
        encoding, units = "UCS-2", [2 if ord(char) > 0xFFFF else 1 for char in text]
    single, per_part = LIMITS[encoding]
    length = sum(units)
    if length <= single:
        return SmsLength(encoding, length, 1 if length else 0)
    segments, used = 1, 0
    for size in units:
        if used + size > per_part:
            segments, used = segments + 1, 0
        used += size
    return SmsLength(encoding, length, segments)
