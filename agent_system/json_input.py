"""JSON that someone else wrote (a received library, metrics file, rollout dump or manifest), read with bounds.

``json.loads`` fails in ways that are not ``JSONDecodeError``: an integer of more than 4,300 digits raises a
plain ValueError (Python's limit on int/str conversion), a line nested a hundred thousand levels deep raises
RecursionError, bytes that are not UTF-8 raise UnicodeDecodeError. :func:`loads` turns each into a
:class:`JSONInputError` (a ValueError) of one line naming what was read and why, and refuses integers longer than
:data:`MAX_INT_DIGITS` digits whatever the interpreter's own limit is (converting a huge one takes quadratic time).
"""

from __future__ import annotations

import json
from typing import Any

MAX_INT_DIGITS = 4_300  # Python's default int_max_str_digits


class JSONInputError(ValueError):
    """Input that is not JSON this project reads: the message is one line naming the input and the fault."""


def _integer(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise JSONInputError(f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS:,} are read)")
    return int(text)


def loads(data: str | bytes, what: str) -> Any:
    """``data`` parsed as JSON; JSONInputError naming ``what`` (a path, ``path:line``) for anything else."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        return json.loads(text, parse_int=_integer)
    except JSONInputError as exc:
        raise JSONInputError(f"{what} is not JSON this reads: {exc}") from None
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError:
        raise JSONInputError(f"{what} is not UTF-8 text") from None
    except RecursionError:
        raise JSONInputError(f"{what} is nested too deeply to be read") from None
    except ValueError as exc:  # what the decoder raises besides JSONDecodeError (a float conversion, ...)
        raise JSONInputError(f"{what} is not JSON this reads ({str(exc).splitlines()[0][:200]})") from None
