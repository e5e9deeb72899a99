"""Java ``.properties`` files, read the way ``java.util.Properties.load`` reads them.

Kafka's ``server.properties`` is loaded with ``Properties.load``, so Odradek accepts the same syntax:

1. The text is split into *natural lines* at ``\\n``, ``\\r`` or ``\\r\\n``.
2. A natural line holding only whitespace (space, tab, form feed) is blank and skipped. A line whose
   first non-whitespace character is ``#`` or ``!`` is a comment and skipped whole (a backslash at
   its end does not continue it).
3. A natural line ending in an odd number of backslashes continues on the next natural line; the
   backslash and line break are dropped, and so is the leading whitespace of the next line (which is
   never read as a comment, even if it starts with ``#``). The result is one *logical line*.
4. The key runs from the first non-whitespace character to the first unescaped ``=``, ``:`` or
   whitespace. After it come optional whitespace, at most one ``=`` or ``:``, optional whitespace;
   the rest of the line is the value. Trailing whitespace of the value is kept (Kafka's config
   layer trims it, as Java's ``ConfigDef`` does). ``key`` alone gives the empty value.
5. In keys and values ``\\t \\n \\r \\f`` are escapes, ``\\uXXXX`` is a UTF-16 code unit (a
   surrogate pair written as two escapes becomes one character), and a backslash before any
   other character stands for that character (``\\=``, ``\\:``, ``\\#``, ``\\ ``, ``\\\\``).
   A malformed ``\\u`` escape raises :class:`PropertiesError` with the line number.
6. A key given twice keeps the last value, as ``Hashtable.put`` does.

Deliberate deviation: ``Properties.load(InputStream)`` decodes ISO-8859-1. :func:`load_properties`
decodes UTF-8 (what editors write today) and falls back to ISO-8859-1 only for bytes that are not
valid UTF-8, so an ASCII file — every real server.properties — reads identically.

Pure functions with no shared state: any thread may call them.
"""

from __future__ import annotations

import os

__all__ = ["PropertiesError", "parse_properties", "load_properties"]

_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """The text is not a valid .properties file (only a malformed ``\\uXXXX`` escape can cause this)."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continued natural lines; return (first natural line number, logical line) pairs.

    Comment and blank lines are dropped here, because whether a line is a comment is decided on the
    natural line (rule 2) but never on a continuation (rule 3).
    """
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(natural):
        line_no = i + 1
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                # An odd run of backslashes: the last one escapes the line break.
                parts.append(line[:-1])
                if i >= len(natural):
                    break  # continuation at end of file: Java drops the backslash too
                line = natural[i].lstrip(_WHITESPACE)
                i += 1
                continue
            parts.append(line)
            break
        out.append((line_no, "".join(parts)))
    return out


def _split_key(line: str) -> tuple[str, str]:
    """Split a logical line into its raw (still escaped) key and value."""
    n = len(line)
    pos = 0
    escaped = False
    value_start = n
    has_sep = False
    while pos < n:
        c = line[pos]
        if not escaped and c in "=:":
            value_start = pos + 1
            has_sep = True
            break
        if not escaped and c in _WHITESPACE:
            value_start = pos + 1
            break
        escaped = (c == "\\") and not escaped
        pos += 1
    key = line[:pos]
    while value_start < n:
        c = line[value_start]
        if c not in _WHITESPACE:
            if not has_sep and c in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return key, line[value_start:]


def _unescape(raw: str, line_no: int) -> str:
    if "\\" not in raw:
        return raw
    units: list[str] = []
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        i += 1
        if c != "\\" or i >= n:
            # A lone trailing backslash can only remain after a continuation at end of file.
            if c != "\\":
                units.append(c)
            continue
        c = raw[i]
        i += 1
        if c == "u":
            digits = raw[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"line {line_no}: malformed \\uxxxx encoding: \\u{digits!r}")
            units.append(chr(int(digits, 16)))
            i += 4
        else:
            units.append(_SIMPLE_ESCAPES.get(c, c))
    # \uD83D\uDE00 arrives as two surrogate halves; round-trip through UTF-16 to pair them.
    return "".join(units).encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def parse_properties(text: str) -> dict[str, str]:
    """Parse .properties text into an ordered dict of key -> value (last duplicate wins)."""
    result: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        raw_key, raw_value = _split_key(line)
        key = _unescape(raw_key, line_no)
        result.pop(key, None)  # keep the order of the winning (last) occurrence
        result[key] = _unescape(raw_value, line_no)
    return result


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a .properties file (UTF-8, falling back to ISO-8859-1; see module doc)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    if text.startswith("\ufeff"):
        text = text[1:]  # a BOM from Windows editors is not part of the first key
    return parse_properties(text)
