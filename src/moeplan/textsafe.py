"""Text from input files made safe to print or to write into a script comment (no I/O).

Names, paths and config strings (``architectures``, model names, folder names) come from
files a user may not have written. Printed raw, an ESC sequence in them moves the cursor,
clears the screen or sets the window title; written raw into a ``# comment`` of a launch
script, a newline ends the comment and the next line runs. :func:`escape_controls` replaces
every control or format character by a visible escape (``\\x1b``, ``\\n``, ``\\u202e``), so
the text stays one inert line; :func:`ascii_fallback` is the codec error handler the CLI
installs on its streams so that any locale (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``) can
print moeplan's messages and tables.
"""

from __future__ import annotations

import codecs
import re
import unicodedata

#: Unicode categories escaped: Cc (C0/C1 controls: ESC, BEL, CR, LF, NUL, CSI U+009B…),
#: Cf (format: bidi overrides U+202A-U+202E, zero-width characters), Zl/Zp (line/paragraph
#: separators) — the characters that change how a terminal or a shell reads the line.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_ASCII_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else (f"\\U{code:08x}")
    )


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in UNSAFE_CATEGORIES


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every control/format character (except those in ``keep``) escaped."""
    if text.isascii():
        if not _ASCII_UNSAFE.search(text):
            return text
        return _ASCII_UNSAFE.sub(lambda m: m[0] if m[0] in keep else _escape_char(m[0]), text)
    return "".join(_escape_char(c) if _unsafe(c) and c not in keep else c for c in text)


#: ASCII spellings of the non-ASCII characters moeplan's own messages and tables use.
ASCII_SPELLING = {
    "\u2014": "--",
    "\u2013": "-",
    "\u2212": "-",
    "\u00d7": "x",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u2260": "!=",
    "\u2248": "~",
    "\u00b5": "u",
    "\u03bc": "u",
    "\u2026": "...",
    "\u2192": "->",
    "\u2190": "<-",
    "\u2194": "<->",
    "\u00b7": ".",
    "\u2022": "*",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u00b1": "+/-",
    "\u221e": "inf",
    "\u00b2": "^2",
    "\u00b3": "^3",
    "\u2009": " ",
    "\u00a0": " ",
    "\u202f": " ",
    "\u2032": "'",
    "\u2191": "^",
    "\u2193": "v",
    "\u2713": "ok",
    "\u2717": "x",
    "\u03b1": "alpha",
    "\u03b2": "beta",
    "\u03c3": "sigma",
    "\u0394": "delta",
    "\u00b0": " deg",
}
ERROR_HANDLER = "moeplan_ascii"


def ascii_fallback(err: UnicodeError) -> tuple[str, int]:
    """Codec error handler: known characters by their ASCII spelling, others as ``\\uXXXX``."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(ASCII_SPELLING.get(c) or _escape_char(c) for c in bad), err.end


def register_fallback() -> str:
    """Register :func:`ascii_fallback` under :data:`ERROR_HANDLER` (idempotent); its name."""
    try:
        codecs.lookup_error(ERROR_HANDLER)
    except LookupError:
        codecs.register_error(ERROR_HANDLER, ascii_fallback)
    return ERROR_HANDLER
