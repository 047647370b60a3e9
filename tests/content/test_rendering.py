"""The sandbox against template bombs: each fails with a clear reason, and the work it did
before failing is bounded — counted by what the template itself recorded on its way, or by
the memory the render allocated (tracemalloc), never by how long it took."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from app.content.budget import MAX_BUILT, MAX_STEPS, RENDER_SECONDS
from app.content.limits import MAX_INT_BITS, MAX_OUTPUT
from app.content.rendering import TEXT_ENV, RenderError, check_variant, compile_variant, render

# A bomb that was refused before it allocated stays far below what it asked for (each of
# these would take hundreds of megabytes to gigabytes).
ALLOCATION_CEILING = 32 * 1024 * 1024


# Time enough that a test of another limit never meets the time limit first on a slow machine.
UNHURRIED = 30.0


def check_source(field: str, source: str) -> list[str]:
    """What a save finds wrong with one field's source."""
    return check_variant({field: source})[1].get(field, [])


def rendered(field: str, source: str, seconds: float = RENDER_SECONDS, **data: Any) -> str:
    return render(compile_variant({field: source}), data, seconds)[field]


def refusal(source: str, field: str = "text", seconds: float = RENDER_SECONDS, **data: Any) -> str:
    """Why rendering `source` fails (within `seconds` of CPU)."""
    with pytest.raises(RenderError) as raised:
        rendered(field, source, seconds, **data)
    return raised.value.detail


def peak_allocation(action: Callable[[], Any]) -> int:
    """The most memory `action` held at once, in bytes."""
    tracemalloc.start()
    try:
        action()
    except RenderError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


# -- integers ------------------------------------------------------------------------------


def test_a_power_is_refused_before_it_is_computed():
    steps: list[int] = []
    source = (
        "{% set a = x ** 1000 %}{{ steps.append(a.bit_length()) or '' }}"
        "{% set b = a ** 1000 %}{{ steps.append(b.bit_length()) or '' }}{{ b ** 30 > 0 }}"
    )
    assert refusal(source, x=10, steps=steps) == (
        f"not allowed: the template makes an integer of more than {MAX_INT_BITS} bits (a power too large)"
    )
    assert steps == [3322]  # 10**1000 was made; (10**1000)**1000 never was


def test_the_bomb_visible_in_the_source_is_refused_at_save():
    assert check_source("text", "{{ ((10**1000)**1000)**30 > 0 }}") == [
        f"The template makes an integer of more than {MAX_INT_BITS} bits (a power too large)."
    ]
    assert check_source("text", "{{ 2 ** 100 + x ** 1000 }}") == []  # nothing visible is too big


def test_repeated_multiplication_stops_at_the_integer_cap():
    sizes: list[int] = []
    source = (
        "{% set ns = namespace(x=3) %}{% for i in range(1000) %}"
        "{% set ns.x = ns.x * ns.x %}{{ sizes.append(ns.x.bit_length()) or '' }}{% endfor %}"
    )
    assert (
        refusal(source, sizes=sizes) == f"not allowed: the template makes an integer of more than {MAX_INT_BITS} bits"
    )
    assert len(sizes) == 11 and max(sizes) <= MAX_INT_BITS  # 3**2048 was the last one made


def test_an_integer_too_big_to_operate_on_is_refused_as_an_operand():
    source = "{{ (x * 1) // 7 }}"
    assert refusal(source, x=2**5000).endswith(f"an integer of more than {MAX_INT_BITS} bits")


def test_a_shift_is_not_in_the_language_and_its_method_is_private():
    assert check_source("text", "{{ 1 << 100000 }}") == ["Template syntax error on line 1: unexpected '<'"]
    assert check_source("text", "{{ (1).__lshift__(100000) }}") == ["Access to '__lshift__' is not allowed."]
    assert "__lshift__" in refusal("{{ x|attr(name) }}", x=1, name="__lshift__")


# -- strings and lists ---------------------------------------------------------------------

BLOW_UPS = [
    ("{{ 'ab' * n }}", {"n": 10**9}),
    ("{{ [s] * 2000 }}", {"s": "x" * 1000}),
    ("{{ s|replace('a', s) }}", {"s": "a" * 20000}),
    ("{{ s.replace('a', s) }}", {"s": "a" * 20000}),
    ("{{ s.replace('', s) }}", {"s": "a" * 20000}),
    ("{{ s.expandtabs(200000) }}", {"s": "\t" * 20000}),
    ("{{ s|list|join(s) }}", {"s": "a" * 20000}),
    ("{{ s.join(s) }}", {"s": "a" * 20000}),
    ("{{ s|indent(s, blank=true) }}", {"s": "\n" * 20000}),
    ("{{ s|wordwrap(1, wrapstring=w) }}", {"s": "a " * 20000, "w": "x" * 20000}),
    ("{{ s.translate({97: s}) }}", {"s": "a" * 20000}),
    ("{% for i in range(100) %}{{ l.extend(l) or '' }}{% endfor %}", {"l": [1]}),
    ("{% for i in range(1000) %}{{ l.append(s) or '' }}{% endfor %}{{ l }}", {"l": [], "s": "x" * 100000}),
    ("{% for i in range(1000) %}{{ l.append(s) or '' }}{% endfor %}{{ l|string }}", {"l": [], "s": "x" * 100000}),
    ("{% for i in range(1000) %}{{ l.append(s) or '' }}{% endfor %}{{ l ~ '' }}", {"l": [], "s": "x" * 100000}),
]


@pytest.mark.parametrize(("source", "data"), BLOW_UPS)
def test_a_string_or_list_blow_up_is_refused_before_it_is_built(source, data):
    assert refusal(source, **data) == f"not allowed: the template makes a value of more than {MAX_OUTPUT} characters"
    assert peak_allocation(lambda: rendered("text", source, **data)) < ALLOCATION_CEILING


def test_a_list_grows_no_further_than_the_cap():
    grown: list[int] = [1]
    refusal("{% for i in range(100) %}{{ l.extend(l) or '' }}{% endfor %}", l=grown)
    assert len(grown) == 2**18 == MAX_OUTPUT  # the last doubling that fit


def test_values_each_under_the_cap_still_count_against_what_a_render_may_build():
    kept: list[str] = []
    source = "{% for i in range(1000) %}{{ kept.append(x|center(262144)) or '' }}{% endfor %}"
    assert (
        refusal(source, kept=kept, x="x") == f"not allowed: the template builds more than {MAX_BUILT} characters in all"
    )
    assert len(kept) * MAX_OUTPUT <= MAX_BUILT
    assert peak_allocation(lambda: rendered("text", source, kept=[], x="x")) < ALLOCATION_CEILING


def test_sum_adds_numbers_only():
    assert refusal("{{ s|list|map('list')|sum(start=[]) }}", s="x" * 1000) == (
        "not allowed: sum adds numbers only; join strings with join"
    )
    assert rendered("text", "{{ [1, 2.5, 3]|sum }}") == "6.5"


# -- repetition: loops, macros, recursion, time --------------------------------------------


def test_macro_fan_out_spends_the_step_budget():
    calls: list[int] = []
    source = (
        "{% macro f(n) %}{{ calls.append(n) or '' }}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
        "{{ f(40) }}"
    )
    assert refusal(source, seconds=UNHURRIED, calls=calls) == (
        f"not allowed: the template runs more than {MAX_STEPS} loop iterations and macro calls"
    )
    assert len(calls) == MAX_STEPS  # 2**41 calls were asked for


def test_a_recursive_loop_counts_every_iteration():
    def tree(depth: int) -> list:
        return [] if depth == 0 else [tree(depth - 1), tree(depth - 1)]

    seen: list[int] = []
    source = "{% for node in [tree] recursive %}{{ seen.append(1) or '' }}{{ loop(node) }}{% endfor %}"
    assert "loop iterations" in refusal(source, seconds=UNHURRIED, tree=tree(15), seen=seen)  # 65,535 nodes
    assert len(seen) <= MAX_STEPS


def test_a_render_stops_when_its_time_is_up():
    done: list[int] = []
    source = (
        "{% for i in range(1000) %}{% for j in range(9) %}"
        "{{ done.append(words|wordcount) or '' }}{% endfor %}{% endfor %}"
    )
    assert (
        refusal(source, words="a " * 100000, done=done) == "not allowed: the template takes more than 0.25 s to render"
    )
    assert len(done) < 9000  # stopped on the clock, long before the step budget


def test_lipsum_is_gone_and_range_is_bounded():
    assert set(TEXT_ENV.globals) == {"range", "dict", "cycler", "joiner", "namespace"}
    assert refusal("{{ lipsum(262144) }}") == "'lipsum' is undefined"
    assert refusal("{% for i in range(n) %}{% endfor %}", n=5000) == "not allowed: range() is limited to 1000 items"


def test_good_templates_render_as_before():
    source = (
        "{% macro row(u) %}{{ u.name|title }}: {{ '%.2f'|replace('%', '') }} {{ u.things|join(', ') }}{% endmacro %}"
        "{% for u in users %}{{ row(u) }}\n{% endfor %}{{ (2 ** 64) * 3 }} {{ 'ab' * 3 }} {{ '  x'.center(7) }}"
    )
    users = [{"name": "ada", "things": ["a", "b"]}, {"name": "bo", "things": []}]
    assert rendered("text", source, users=users) == "Ada: .2f a, b\nBo: .2f \n55340232221128654848 ababab     x  "


# -- control characters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "data"),
    [
        ('{{ "\\x00" }}', {}),
        ("{{ (0).to_bytes(1, 'big').decode() }}", {}),
        ("Hi {{ name }}", {"name": "a\x00b"}),
        ("{{ name }}", {"name": "\x1b[31m"}),
    ],
)
def test_control_characters_made_by_rendering_fail_the_render(source, data):
    assert refusal(source, **data).startswith("not allowed: the output contains the control character U+00")


def test_tab_newline_and_carriage_return_are_text():
    assert rendered("text", "{{ s }}", s="a\tb\r\nc") == "a\tb\r\nc"
    assert rendered("html", "{{ s }}", s="a\tb\r\nc") == "a\tb\r\nc"
    assert rendered("subject", "{{ s }}", s="a\tb") == "a\tb"


@pytest.mark.parametrize("name", ["Ada\r\nBcc: eve@example.com", "Ada\nX", "Ada\rX"])
def test_a_subject_is_one_line(name):
    detail = refusal("Hi {{ name }}", field="subject", name=name)
    assert detail.startswith("not allowed: the output contains a line break (U+000")
    assert detail.endswith("and a subject is one line")


def test_control_characters_visible_in_the_source_are_refused_at_save():
    assert check_source("text", 'a {{ "\\x00" }}') == ["The template prints the control character U+0000."]
    assert check_source("subject", "Hi\n{{ name }}") == [
        "The template prints a line break (U+000A), and a subject is one line."
    ]
    assert check_source("text", "{{ s.replace('\\x00', '') }}") == []  # removing them is fine


def test_an_error_detail_is_short_and_printable():
    error = RenderError("text", "KeyError: " + "\x00" * 1000)
    assert len(error.detail) == 301
    assert "\x00" not in error.detail


def test_a_template_nested_too_deeply_is_refused_at_save():
    assert check_source("text", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}") == ["The template nests too deeply."]


def test_a_filter_or_test_the_sandbox_lacks_is_refused_at_save():
    """Parsing takes any name; Jinja looks it up when it compiles, or only when an `if`
    branch runs, so without this the save passed and every send reaching it failed."""
    refused = "Template syntax error on line 1: No filter named 'format'."
    assert check_source("text", '{{ "%c"|format(n) }}') == [refused]
    assert check_source("text", "{% if x %}\n{{ y|upperr }}{% endif %}{% if y is evenn %}{% endif %}") == [
        "Template syntax error on line 2: No filter named 'upperr'.",
        "Template syntax error on line 2: No test named 'evenn'.",
    ]
    known = "{% filter upper %}{{ y|e|default('-') }}{% endfilter %}{% if y is even %}{% endif %}"
    assert check_source("html", known) == []
