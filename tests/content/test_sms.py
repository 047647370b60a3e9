"""SMS length: encoding, units and parts, as carriers count them."""

from __future__ import annotations

from app.content.sms import SmsLength, measure


def test_an_extension_character_is_never_split_across_parts():
    text = "x" * 152 + "€" + "x" * 152  # 306 units: 2 parts by arithmetic, 3 on the wire
    assert measure(text) == SmsLength("GSM-7", 306, 3)


def test_a_character_outside_gsm_forces_ucs2_and_astral_characters_take_two_units():
    assert measure("ok 🎉") == SmsLength("UCS-2", 5, 1)
    assert measure("🎉" * 35) == SmsLength("UCS-2", 70, 1)
    assert measure("🎉" * 36) == SmsLength("UCS-2", 72, 2)


def test_empty_text_costs_nothing():
    assert measure("") == SmsLength("GSM-7", 0, 0)
