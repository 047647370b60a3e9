"""Compiling a template within caps and a budget, since compiling costs far more than the source's size suggests.

Jinja compiles in four steps: lex and parse the source into a tree, rewrite the tree (the
sandbox's limits), generate Python source from it, and hand that to Python's `compile()`.
A source of 256 KiB took seconds of CPU and most of a gigabyte, and `compile()` runs in C,
where no budget can stop it. So each step is bounded before the next one starts:

- a field's sources are at most MAX_SOURCE_BYTES of UTF-8 together, checked before parsing;
- parsing spends the compile budget for every token it reads (a token filter, Jinja's
  extension hook), so it stops when the time is up;
- a field's trees have at most MAX_NODES nodes together and are at most MAX_DEPTH deep,
  counted without recursion before anything walks them recursively (the checks at save,
  Jinja's own visitors, Python's compiler);
- code generation spends the budget for every piece it writes and stops past MAX_CODE
  characters: that is what bounds the one step nothing can interrupt, Python's `compile()`,
  and the memory a compiled template keeps (its `code_size`, which caches weigh it by).

The caps leave a campaign email of 64 KB, every article written out, room to spare
(BENCHMARKS.md, "Compiling templates", has what it and the worst the caps allow cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from jinja2 import Template, nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream
from jinja2.sandbox import SecurityError

from app.content import budget

MAX_SOURCE_BYTES = 64 * 1024
MAX_NODES = 5_000
MAX_DEPTH = 50
MAX_CODE = 512 * 1024


def check_size(sources: Iterable[str]) -> None:
    """Refuse a field whose sources are longer than MAX_SOURCE_BYTES together."""
    size = 0
    for source in sources:
        size += len(source.encode())
        if size > MAX_SOURCE_BYTES:
            raise SecurityError(f"the template is longer than {MAX_SOURCE_BYTES} bytes")


def check_shape(trees: Sequence[nodes.Node]) -> None:
    """Refuse a field whose trees have more than MAX_NODES nodes together or nest deeper than MAX_DEPTH."""
    count = 0
    pending = [(tree, 1) for tree in trees]
    while pending:
        node, depth = pending.pop()
        count += 1
        if count > MAX_NODES:
            raise SecurityError(f"the template has more than {MAX_NODES} tags, variables and operators in all")
        if depth > MAX_DEPTH:
            raise SecurityError(f"the template nests more than {MAX_DEPTH} levels deep")
        pending.extend((child, depth + 1) for child in node.iter_child_nodes())


class TokenBudget(Extension):
    """Spends the compile budget for every token the parser reads, so a long parse stops in time."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        for token in stream:
            budget.tick()
            yield token


class BudgetedCodeGenerator(CodeGenerator):
    """Jinja's code generator, spending the budget as it writes and stopping past MAX_CODE characters."""

    def write(self, x: str) -> None:
        budget.tick()
        super().write(x)
        if self.stream.tell() > MAX_CODE:
            raise SecurityError(f"the template compiles to more than {MAX_CODE} characters of code")


class SizedTemplate(Template):
    """A compiled template that knows how many characters of Python it was made from: its memory
    grows with them (about ten bytes each), far more than with its source."""

    code_size = 0


def code_size(value: object) -> int:
    """The characters of Python the compiled templates inside `value` (a dict, list or tuple) were made from."""
    if isinstance(value, SizedTemplate):
        return value.code_size
    if isinstance(value, dict):
        return sum(code_size(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(code_size(item) for item in value)
    return 0
