"""Arithmetic over formula tokens, evaluated exactly (Fractions) by a small parser, never by eval();
and a solver that writes a formula reaching a target from a multiset of numbers (the expert)."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from itertools import combinations
from typing import Sequence


class FormulaError(ValueError):
    """The token sequence is not a well-formed formula (or divides by zero)."""


def evaluate(tokens: Sequence[str]) -> Fraction:
    """Value of a formula of number tokens, + - * / and parentheses, with the usual precedence.
    Two numbers in a row are malformed (each token is one card)."""
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise FormulaError("formula ends too early")
        pos += 1
        return tokens[pos - 1]

    def expr() -> Fraction:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term() -> Fraction:
        value = factor()
        while peek() in ("*", "/"):
            op = take()
            rhs = factor()
            if op == "*":
                value = value * rhs
            elif rhs == 0:
                raise FormulaError("division by zero")
            else:
                value = value / rhs
        return value

    def factor() -> Fraction:
        tok = take()
        if tok == "(":
            value = expr()
            if take() != ")":
                raise FormulaError("unclosed parenthesis")
            return value
        if tok.isdigit():
            return Fraction(int(tok))
        raise FormulaError(f"unexpected token {tok!r}")

    if not tokens:
        raise FormulaError("empty formula")
    result = expr()
    if pos != len(tokens):
        raise FormulaError(f"unexpected token {tokens[pos]!r}")
    return result


_OPS = ("+", "-", "*", "/")


@lru_cache(maxsize=4096)
def _reachable(numbers: tuple[int, ...]) -> dict[Fraction, tuple[str, ...]]:
    """Every value reachable using all of ``numbers`` (sorted) exactly once, with one token formula each.
    Splits the multiset into two non-empty parts in every way and combines their reachable values; the
    cache shares sub-results across calls (card counts are <= 4, so this stays small)."""
    if len(numbers) == 1:
        return {Fraction(numbers[0]): (str(numbers[0]),)}
    out: dict[Fraction, tuple[str, ...]] = {}
    idx = range(len(numbers))
    for k in range(1, len(numbers) // 2 + 1):
        for left_idx in combinations(idx, k):
            left = tuple(numbers[i] for i in left_idx)
            right = tuple(numbers[i] for i in idx if i not in left_idx)
            for a, fa in _reachable(left).items():
                for b, fb in _reachable(right).items():
                    for op in _OPS:
                        for (x, fx), (y, fy) in (((a, fa), (b, fb)), ((b, fb), (a, fa))):
                            if op == "/" and y == 0:
                                continue
                            value = x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x / y
                            if value not in out:
                                out[value] = (*_group(fx), op, *_group(fy))
    return out


def _group(tokens: tuple[str, ...]) -> tuple[str, ...]:
    """Parenthesise a compound sub-formula so that it evaluates as one operand; a lone number needs none."""
    return ("(", *tokens, ")") if len(tokens) > 1 else tokens


def solve(numbers: Sequence[int], target: int) -> list[str] | None:
    """Tokens of a formula using every number exactly once that equals ``target``, or None."""
    found = _reachable(tuple(sorted(int(n) for n in numbers))).get(Fraction(target))
    return list(found) if found is not None else None
