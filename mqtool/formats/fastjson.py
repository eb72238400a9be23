"""JSON as fastjson 1.2.x writes and reads ``config/*.json`` (reference §1.4): bare keys, tabs, leniencies."""

from __future__ import annotations

import json
import re
from typing import Any, Hashable, Iterator

_WS = re.compile(r"(?:[ \t\r\n\f\b]+|//[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)
_NUMBER = re.compile(r"-?(?:\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?[LSBFD]?", re.ASCII)  # ASCII digits, as the lexer
_BARE_KEY = re.compile(r"[A-Za-z0-9_$\-.]+")
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "0": "\0"}
_HEX_ESCAPES = {"u": re.compile(r"[0-9A-Fa-f]{4}"), "x": re.compile(r"[0-9A-Fa-f]{2}")}  # \uXXXX, \xXX
_PLAIN = {'"': re.compile(r'[^"\\]*'), "'": re.compile(r"[^'\\]*")}  # string characters up to a quote or escape
_LITERALS = {"true": True, "false": False, "null": None, "undefined": None}


class FastjsonError(ValueError):
    """Text fastjson's parser would reject; ``pos`` is the character offset of the problem."""

    def __init__(self, message: str, text: str, pos: int):
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        super().__init__(f"{message} at line {line} column {column}")
        self.pos = pos


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 1 if text.startswith("\ufeff") else 0

    def fail(self, message: str, pos: int | None = None):
        raise FastjsonError(message, self.text, self.pos if pos is None else pos)

    def skip(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos : self.pos + 1]

    def document(self) -> Any:
        value = self.value()
        if self.peek():
            self.fail("text after the end of the document (fastjson: not close json text)")
        return value

    def value(self) -> Any:
        ch = self.peek()
        if ch and ch in "{[":
            return self.obj() if ch == "{" else self.array()
        if ch and ch in "\"'":
            return self.string()
        if ch == "-" or ch.isdigit():
            return self.number()
        if not ch:
            self.fail("unexpected end of text")
        m = re.compile(r"[A-Za-z]+").match(self.text, self.pos)
        word = m.group() if m else ""
        if word not in _LITERALS:
            self.fail(f"unexpected {self.text[self.pos:self.pos + 12]!r}")
        self.pos += len(word)
        return _LITERALS[word]

    def obj(self) -> dict:
        out: dict = {}
        for _ in self.items("}", "object"):
            key = self.key()
            if self.peek() != ":":
                self.fail("expected ':' after an object key")
            self.pos += 1
            out[key] = self.value()
        return out

    def key(self) -> Hashable:
        ch = self.peek()
        if ch and ch in "\"'":
            return self.string()
        m = _BARE_KEY.match(self.text, self.pos)
        if not m:
            self.fail("expected an object key")
        self.pos = m.end()
        word = m.group()  # AllowUnQuotedFieldNames; fastjson writes Integer/Long map keys bare
        return int(word) if re.fullmatch(r"-?\d+", word) else word

    def array(self) -> list:
        return [self.value() for _ in self.items("]", "array")]

    def items(self, close: str, what: str) -> Iterator[None]:
        """Yield where each item of the container at ``pos`` starts, until ``close``, skipping extra commas."""
        self.pos += 1
        while True:
            ch = self.peek()
            if ch == close:
                self.pos += 1
                return
            if ch == ",":
                self.pos += 1
                continue
            yield
            if self.peek() not in (",", close):  # the comma or the close: taken at the loop's top
                self.fail(f"expected ',' or '{close}' in an {what}")

    def string(self) -> str:
        text, quote = self.text, self.text[self.pos]
        i = self.pos + 1
        parts = []
        plain = _PLAIN[quote]
        while True:
            j = plain.match(text, i).end()
            parts.append(text[i:j])
            if j >= len(text):
                self.fail("unclosed string", self.pos)
            if text[j] == quote:
                self.pos = j + 1
                return "".join(parts)
            esc = text[j + 1 : j + 2]
            digits = esc in _HEX_ESCAPES and _HEX_ESCAPES[esc].match(text, j + 2)
            if digits:
                parts.append(chr(int(digits.group(), 16)))
                i = digits.end()
            elif esc in _ESCAPES:
                parts.append(_ESCAPES[esc])
                i = j + 2
            else:
                self.fail(f"invalid escape {text[j:j + 2]!r}", j)

    def number(self) -> int | float:
        m = _NUMBER.match(self.text, self.pos)
        if not m:
            self.fail("invalid number")
        self.pos = m.end()
        word = m.group().rstrip("LSBFD")
        return float(word) if "." in word or "e" in word or "E" in word else int(word)


def loads(text: str) -> Any:
    """``JSON.parse`` of ``text`` (``FastjsonError``): strict JSON by the C ``json`` decoder, the rest by the lenient parser."""
    try:
        return json.loads(text, parse_constant=_reject)
    except (ValueError, RecursionError):
        return _Parser(text).document()


def _reject(name: str):
    raise ValueError(name)  # NaN / Infinity: not fastjson's; let the lenient parser judge
