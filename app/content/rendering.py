"""Rendering templates safely: one sandbox for the preview endpoint and the worker.

Template sources come from API callers, so they are untrusted code. They run in Jinja2's
SandboxedEnvironment (no `_`-attributes, no internals), with StrictUndefined (a missing
variable is an error, never a blank), HTML autoescaped in the `html` field only, and
limits that keep one template from taking a worker, or its neighbours' messages, down:

- what an operator, call or filter would make is sized before it is made
  (app.content.limits): values and each field's output at most MAX_OUTPUT characters,
  integers at most MAX_INT_BITS bits; numeric arguments above MAX_OUTPUT are refused;
- a render spends a budget as it runs (app.content.budget): loop iterations and macro,
  block and `loop()` calls, characters built, and CPU time, checked in the hooks the
  sandbox calls all the time, so it stops in a thread without signals;
- `range()` yields at most MAX_RANGE items; `lipsum`, `%`-formatting and `str.format`
  are gone: they allocate at will;
- a rendered field may not contain control characters (PostgreSQL cannot store NUL, a
  provider cannot send the others), and a subject no line break (it would become a header).

Compiling is bounded too (app.content.compiling): a field's size, nodes and depth are capped,
and parsing and code generation spend a compile budget. Whatever goes wrong compiling is the
template's own RenderError, never its batch's.

`check_variant` rejects at save time what the sandbox would refuse at every render anyway,
constant arithmetic included, and what does not compile, so an injection attempt or a bomb
is a 422 when it is written, not a failure on every send. Compiled versions, and the
RenderError of one that does not compile, are cached per (project, key, version, locale):
versions never change.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError, nodes, pass_eval_context
from jinja2.nodes import EvalContext
from jinja2.runtime import BlockReference, LoopContext, Macro, markup_join, str_join
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
    SandboxedEnvironment,
    SecurityError,
)
from jinja2.visitor import NodeTransformer

from app.content import budget
from app.content.compiling import (
    BudgetedCodeGenerator,
    SizedTemplate,
    TokenBudget,
    check_shape,
    check_size,
    code_size,
)
from app.content.limits import (
    CHECKED_FILTERS,
    MAX_OUTPUT,
    check_arguments,
    check_length,
    check_operands,
    checked_filter,
    checked_value,
    joined_size,
    method_guard,
    printable,
)
from app.enums import Channel
from app.schemas.text import UNICODE_LINE_BREAKS

V = TypeVar("V")

MAX_RANGE = 1000
MAX_DETAIL = 300

Compiled = dict[str, Any]

# The fields a template has per channel. `data` (push) and `payload` (webhook) are JSON
# whose string leaves are templates; the others are template strings.
FIELDS: Mapping[Channel, tuple[str, ...]] = {
    Channel.EMAIL: ("subject", "text", "html"),
    Channel.SMS: ("text",),
    Channel.PUSH: ("title", "body", "data"),
    Channel.WEBHOOK: ("payload",),
    Channel.IN_APP: ("title", "body", "data"),
}

FORBIDDEN_NAMES = frozenset(
    {"mro", "format", "format_map"}
    | UNSAFE_GENERATOR_ATTRIBUTES
    | UNSAFE_COROUTINE_ATTRIBUTES
    | UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
)
UNSUPPORTED_TAGS = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)

# Control characters a rendered field may not contain: tab, newline and carriage return
# are text; a subject is one header line, so it may not break either, nor hold the line
# breaks Python's email library also honours (NEL, LINE and PARAGRAPH SEPARATOR).
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
LINE_CONTROL = re.compile(f"[\\x00-\\x08\\x0a-\\x1f\\x7f{UNICODE_LINE_BREAKS}]")
ONE_LINE_FIELDS = frozenset({"subject"})


class RenderError(Exception):
    """A template could not be rendered with the data given; `undefined` when a variable is missing.

    The detail is shortened and cleaned of control characters: it is stored with the
    message and answered to the caller, and may quote what the template made.
    """

    def __init__(self, field: str, detail: str, undefined: bool = False):
        if len(detail) > MAX_DETAIL:
            detail = detail[:MAX_DETAIL] + "…"
        detail = CONTROL.sub("\N{REPLACEMENT CHARACTER}", detail)
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail
        self.undefined = undefined

    def again(self) -> RenderError:
        """A fresh copy to raise once more: raising one exception object again and again grows its traceback."""
        return RenderError(self.field, self.detail, undefined=self.undefined)

    def sentence(self) -> str:
        """The detail as a save's field errors read: a capital, and a full stop after a word."""
        text = self.detail[:1].upper() + self.detail[1:]
        return text + "." if text[-1:].isalnum() else text


def control_character(field: str, text: str) -> str | None:
    """What is wrong with the characters of a rendered field, or None when nothing is."""
    one_line = field in ONE_LINE_FIELDS
    found = (LINE_CONTROL if one_line else CONTROL).search(text)
    if found is None:
        return None
    code = f"U+{ord(found.group()):04X}"
    if one_line and found.group() in "\r\n" + UNICODE_LINE_BREAKS:
        return f"a line break ({code}), and a {field} is one line"
    return f"the control character {code}"


def _small_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise SecurityError(f"range() is limited to {MAX_RANGE} items")
    return numbers


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """Wrapped around every loop's iterable (by _Limits, and by Sandbox.call for a recursive
    `loop()`): each iteration is a step of the render's budget."""
    for item in iterable:
        budget.step()
        yield item


@pass_eval_context
def _capped_concat(eval_ctx: EvalContext, parts: list[Any]) -> str:
    """`a ~ b`, as Jinja joins it, sized before and checked after."""
    check_length(joined_size("", parts))
    return checked_value((markup_join if eval_ctx.autoescape else str_join)(parts))


class _Limits(NodeTransformer):
    """Rewrites a parsed template so its loops spend the budget and its `~` joins are capped."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "loop_budget", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        parts = nodes.List(node.nodes, lineno=node.lineno)
        return nodes.Filter(parts, "capped_concat", [], [], None, None, lineno=node.lineno)


def operate(operator: str, left: Any, right: Any) -> Any:
    """One arithmetic operator, refused before it runs when it would cost too much; the
    sandbox's operators and check_source's folding of constant expressions both run here."""
    if operator == "%" and isinstance(left, str):
        raise SecurityError("%-formatting is not allowed; use filters")
    check_operands(operator, left, right)
    return checked_value(SandboxedEnvironment.default_binop_table[operator](left, right))


class Sandbox(SandboxedEnvironment):
    """SandboxedEnvironment with StrictUndefined, the size limits and the render budget."""

    intercepted_binops = frozenset(SandboxedEnvironment.default_binop_table)

    code_generator_class = BudgetedCodeGenerator
    template_class = SizedTemplate

    def __init__(self, autoescape: bool) -> None:
        super().__init__(
            autoescape=autoescape,
            undefined=StrictUndefined,
            cache_size=0,
            finalize=printable,
            extensions=[TokenBudget],
        )
        self.globals["range"] = _small_range
        del self.globals["lipsum"]
        self.filters = {
            name: checked_filter(name, f) for name, f in {**self.filters, **CHECKED_FILTERS}.items() if name != "format"
        }
        self.filters["loop_budget"] = _counted
        self.filters["capped_concat"] = _capped_concat

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return attr not in FORBIDDEN_NAMES and super().is_safe_attribute(obj, attr, value)

    def wrap_str_format(self, value: Any) -> None:
        """No sandboxed str.format: `format` is refused like any unsafe attribute instead."""
        return None

    def getattr(self, obj: Any, attribute: str) -> Any:
        budget.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        budget.tick()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        check_arguments(args, kwargs)
        if isinstance(__obj, Macro | BlockReference):
            budget.step()
        elif isinstance(__obj, LoopContext) and args:
            args = (_counted(args[0]), *args[1:])
        guard = method_guard(__obj)
        if guard is not None:
            __obj = functools.partial(guard, __obj.__self__)
        return checked_value(SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        return operate(operator, left, right)

    def compile_limited(self, tree: nodes.Template) -> SizedTemplate:
        """The template of a parsed tree (checked by `check_shape`), its loops and joins limited."""
        code = self.compile(_Limits().visit(tree), raw=True)
        # Jinja's from_code is typed to answer a Template, though it builds the class it is called on.
        template = cast(
            SizedTemplate, SizedTemplate.from_code(self, compile(code, "<template>", "exec"), self.make_globals(None))
        )
        template.code_size = len(code)
        return template


TEXT_ENV = Sandbox(autoescape=False)
HTML_ENV = Sandbox(autoescape=True)


def _env_for(field: str) -> Sandbox:
    return HTML_ENV if field == "html" else TEXT_ENV


def _leaves(value: Any) -> Iterator[str]:
    """The template strings inside a field: itself, or the string leaves of a JSON field."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def check_variant(
    variant: Mapping[str, Any], *, seconds: float = budget.SAVE_COMPILE_SECONDS
) -> tuple[Compiled, dict[str, list[str]]]:
    """Compile a locale variant at save, or find its problems by field without running it.

    A problem is what the sandbox would refuse at every render anyway, or what does not
    compile within the caps and `seconds` (each field its own: a field refused late must not
    spend its neighbours' time): a 422 when it is written, not a failure on every send.
    """
    compiled: Compiled = {}
    problems: dict[str, list[str]] = {}
    for field, value in _fields(variant):
        try:
            with budget.budgeted(seconds, doing="compile"):
                trees = _parsed(field, value)
                found = [problem for tree in trees for problem in _source_problems(field, tree)]
                if found:
                    problems[field] = list(dict.fromkeys(found))
                else:
                    compiled[field] = _compiled(field, value, trees)
        except RenderError as error:
            problems[field] = [error.sentence()]
    return compiled, problems


def _source_problems(field: str, tree: nodes.Template) -> list[str]:
    problems = _unsafe_constructs(tree) + _unknown_names(field, tree) + _literal_problems(field, tree)
    _fold(tree, problems)
    return problems


def _unknown_names(field: str, tree: nodes.Template) -> list[str]:
    """Filters and tests the sandbox does not have (`format` is gone on purpose). Parsing
    accepts any name and Jinja looks them up only when it compiles, or, inside an `if`, when
    the branch runs: every render that reaches one fails, so the save must not pass."""
    env = _env_for(field)
    unknown: list[tuple[str, nodes.Filter | nodes.Test]]
    unknown = [("filter", node) for node in tree.find_all(nodes.Filter) if node.name not in env.filters]
    unknown += [("test", node) for node in tree.find_all(nodes.Test) if node.name not in env.tests]
    return [f"Template syntax error on line {node.lineno}: No {kind} named {node.name!r}." for kind, node in unknown]


def _literal_problems(field: str, tree: nodes.Template) -> list[str]:
    """Control characters the template prints as written, in its text or a printed literal."""
    problems = []
    for output in tree.find_all(nodes.Output):
        for child in output.nodes:
            if isinstance(child, nodes.TemplateData):
                literal = child.data
            elif isinstance(child, nodes.Const) and isinstance(child.value, str):
                literal = child.value
            else:
                continue
            found = control_character(field, literal)
            if found:
                problems.append(f"The template prints {found}.")
    return problems


_UNKNOWN = object()


def _fold(node: nodes.Node, problems: list[str]) -> Any:
    """The value of a constant arithmetic expression (or _UNKNOWN), computed bottom-up once
    per node with the sandbox's own checks: what they refuse, every render would refuse,
    so it is a problem now (`{{ (10**1000)**1000 }}` is visible in the source)."""
    if isinstance(node, nodes.Const):
        return node.value
    values = [_fold(child, problems) for child in node.iter_child_nodes()]
    if not isinstance(node, nodes.BinExpr) or node.operator not in Sandbox.intercepted_binops:
        return _UNKNOWN
    left, right = values
    if left is _UNKNOWN or right is _UNKNOWN:
        return _UNKNOWN
    try:
        return operate(node.operator, left, right)
    except SecurityError as error:
        message = str(error)
        problems.append(f"{message[0].upper()}{message[1:]}.")
    except Exception:  # `1 / 0` and the like fail at preview in their own words
        pass
    return _UNKNOWN


def _unsafe_constructs(tree: nodes.Template) -> list[str]:
    problems = []
    for node in tree.find_all(UNSUPPORTED_TAGS):
        problems.append(f"{type(node).__name__.lower()} is not supported: a template stands alone.")
    names = [node.attr for node in tree.find_all(nodes.Getattr)]
    names += [
        node.arg.value
        for node in tree.find_all(nodes.Getitem)
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str)
    ]
    names += [
        node.args[0].value
        for node in tree.find_all(nodes.Filter)
        if node.name == "attr" and node.args and isinstance(node.args[0], nodes.Const)
    ]
    for name in names:
        if isinstance(name, str) and (name.startswith("_") or name in FORBIDDEN_NAMES):
            problems.append(f"Access to {name!r} is not allowed.")
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Name) and call.node.name == "range":
            problems += _range_problem(call)
    for mod in tree.find_all(nodes.Mod):
        if isinstance(mod.left, nodes.Const) and isinstance(mod.left.value, str):
            problems.append("%-formatting is not allowed; use filters.")
    return problems


def _range_problem(call: nodes.Call) -> list[str]:
    bounds = [arg.value for arg in call.args if isinstance(arg, nodes.Const) and isinstance(arg.value, int)]
    if len(bounds) != len(call.args):
        return []
    try:
        length = len(range(*bounds))
    except (TypeError, ValueError):
        return []
    return [f"range() is limited to {MAX_RANGE} items."] if length > MAX_RANGE else []


# Fields render in this order, so the first error reported is the one a reader meets first.
FIELD_ORDER = ("subject", "title", "text", "body", "html", "data", "payload")


def compile_variant(variant: Mapping[str, Any], *, seconds: float = budget.COMPILE_SECONDS) -> Compiled:
    """Compile every field of one locale variant within the caps and `seconds` of CPU each.

    RenderError names the field that does not compile: whatever goes wrong compiling an
    untrusted template is that template's own failure, never its batch's.
    """
    return {field: _compiled_within(field, value, seconds) for field, value in _fields(variant)}


def _compiled_within(field: str, value: Any, seconds: float) -> Any:
    with budget.budgeted(seconds, doing="compile"):
        return _compiled(field, value, _parsed(field, value))


def _fields(variant: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    return ((field, variant[field]) for field in FIELD_ORDER if variant.get(field) is not None)


def _parsed(field: str, value: Any) -> list[nodes.Template]:
    """The trees of a field's template strings, within the caps on size and shape."""
    sources = list(_leaves(value))
    try:
        check_size(sources)
        trees = [_env_for(field).parse(source) for source in sources]
        check_shape(trees)
    except TemplateSyntaxError as error:
        raise RenderError(field, f"template syntax error on line {error.lineno}: {error.message}") from error
    except RecursionError as error:
        raise RenderError(field, "the template nests too deeply") from error
    except SecurityError as error:  # a cap, or the budget's time
        raise RenderError(field, str(error)) from error
    except Exception as error:  # whatever else parsing an untrusted source raises is that source's
        raise RenderError(field, f"the template does not parse: {type(error).__name__}: {error}") from error
    return trees


def _compiled(field: str, value: Any, trees: list[nodes.Template]) -> Any:
    """A field's trees compiled, in the field's structure (a JSON field keeps its own)."""
    env = _env_for(field)
    try:
        templates = iter([env.compile_limited(tree) for tree in trees])
    except SecurityError as error:  # the budget's time, or the size of the code
        raise RenderError(field, str(error)) from error
    except Exception as error:  # Python refuses what Jinja made of it (too many levels of indentation, …)
        raise RenderError(field, f"the template does not compile: {type(error).__name__}: {error}") from error
    return _rebuild(value, templates)


def _rebuild(value: Any, templates: Iterator[Any]) -> Any:
    """`value` with each template string replaced by the next of `templates`, in `_leaves` order."""
    if isinstance(value, str):
        return next(templates)
    if isinstance(value, Mapping):
        return {key: _rebuild(item, templates) for key, item in value.items()}
    if isinstance(value, list):
        return [_rebuild(item, templates) for item in value]
    return value


def render(compiled: Compiled, context: Mapping[str, Any], seconds: float = budget.RENDER_SECONDS) -> dict[str, Any]:
    """Render a compiled variant within `seconds` of CPU; RenderError names the field and what went wrong."""
    with budget.budgeted(seconds):
        return {field: _render_field(field, value, context) for field, value in compiled.items()}


def _render_field(field: str, value: Any, context: Mapping[str, Any]) -> Any:
    if isinstance(value, dict):
        return {key: _render_field(field, item, context) for key, item in value.items()}
    if isinstance(value, list):
        return [_render_field(field, item, context) for item in value]
    if not hasattr(value, "generate"):
        return value
    try:
        text = _capped_output(value.generate(context))
        found = control_character(field, text)
        if found:
            raise SecurityError(f"the output contains {found}")
        return text
    except UndefinedError as error:
        raise RenderError(field, error.message or "undefined variable", undefined=True) from error
    except SecurityError as error:
        raise RenderError(field, f"not allowed: {error}") from error
    except Exception as error:  # any error of an untrusted template is the template's fault
        raise RenderError(field, f"{type(error).__name__}: {error}") from error


def _capped_output(chunks: Iterator[str]) -> str:
    out: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise SecurityError(f"the output is longer than {MAX_OUTPUT} characters")
        out.append(chunk)
    return "".join(out)


def pick_locale(available: Iterable[str], wanted: Sequence[str | None], default: str) -> str:
    """The variant to use: the first wanted locale we have, else its language, else the default.

    `wanted` is ordered by preference (the message's locale, then the subscriber's), so
    `de-AT` finds `de-AT`, then `de`, and a locale we have no words for finds the default.
    """
    by_lower = {locale.lower(): locale for locale in available}
    for locale in wanted:
        if not locale:
            continue
        for candidate in (locale.lower(), locale.split("-")[0].lower()):
            if candidate in by_lower:
                return by_lower[candidate]
    return default


def as_content(channel: Channel, rendered: Mapping[str, Any]) -> dict[str, Any]:
    """Rendered fields → message_contents columns, the shape deliver's claim reads.

    Push and in-app keep their title in `subject` and body in `text`, as inline content does;
    push data, and a webhook's JSON, go in `payload`, which deliver hands the adapter as the
    push data or the webhook's body.
    """
    if channel in (Channel.PUSH, Channel.IN_APP):
        return {
            "subject": rendered.get("title"),
            "text": rendered.get("body"),
            "payload": rendered.get("data"),
        }
    if channel is Channel.WEBHOOK:
        return {"payload": rendered.get("payload")}
    return {"subject": rendered.get("subject"), "text": rendered.get("text"), "html": rendered.get("html")}


_MISSING: Any = object()


class CompiledCache(Generic[V]):
    """A small thread-safe LRU of what compiling made, one per process: each key's result, or
    the RenderError compiling failed with, so a version that does not compile fails each of
    its messages at once instead of being compiled again for each one.

    It holds at most `size` entries and `code` characters of the Python they were compiled
    from, since a compiled template's memory grows with that (app/content/compiling.py).
    """

    def __init__(self, *, size: int = 2048, code: int = 16 * 1024 * 1024) -> None:
        self.size = size
        self.code = code
        # Builds run per project (a key's first part): what each tenant's templates cost this process.
        self.compiles: Counter[Hashable] = Counter()
        self._items: OrderedDict[tuple[Hashable, ...], tuple[V | RenderError, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Hashable, ...], build: Callable[[], V]) -> V:
        """`key`'s result (a project first), built on the first call; a RenderError is raised again as it was first."""
        with self._lock:
            found, _ = self._items.get(key, (_MISSING, 0))
            if found is _MISSING:
                self.compiles[key[0]] += 1
            else:
                self._items.move_to_end(key)
        if found is _MISSING:
            try:
                found = build()
            except RenderError as error:
                found = error
            self._keep(key, found)
        if isinstance(found, RenderError):
            raise found.again()
        return found

    def _keep(self, key: tuple[Hashable, ...], found: V | RenderError) -> None:
        size = code_size(found)
        with self._lock:
            _, replaced = self._items.pop(key, (None, 0))  # two threads built the same key at once
            self._items[key] = (found, size)
            self._held += size - replaced
            while len(self._items) > self.size or (self._held > self.code and len(self._items) > 1):
                _, (_, evicted) = self._items.popitem(last=False)
                self._held -= evicted

    def __len__(self) -> int:
        return len(self._items)


compiled_cache: CompiledCache[Compiled] = CompiledCache()


class TemplateVersion(Protocol):
    """What rendering needs of a template version: a `Template` row or a row of the prepare query."""

    project_id: str
    key: str
    version: int
    default_locale: str
    created_at: Any

    @property
    def variants(self) -> Mapping[str, Any]: ...  # read only, so a row's dict is one


def mentions(template: TemplateVersion, name: str) -> bool:
    """Whether any field of any locale names `name`: a variable dear to make (a signed link)
    is made only for the templates that can print it."""
    return any(
        name in source
        for variant in template.variants.values()
        for value in variant.values()
        for source in _leaves(value)
    )


def render_version(
    template: TemplateVersion, wanted_locales: Sequence[str | None], context: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Render a version in the best locale it has; compiled once per worker and variant.

    The creation time is part of the cache key so a project deleted and made again under
    the same id can never be served the old project's compiled words.
    """
    locale = pick_locale(template.variants, wanted_locales, template.default_locale)
    key = (template.project_id, template.key, template.version, locale, template.created_at)
    compiled = compiled_cache.get(key, lambda: compile_variant(template.variants[locale]))
    return locale, render(compiled, context)
