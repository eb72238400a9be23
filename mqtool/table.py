"""Tables that never lie, fit to the terminal without cutting a number or an id (issue #11 §3)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence


GAP = 2  # spaces between columns
MIN_LAST = 12  # the last column gets at least this much room before the table gives up
MIN_FOLD = 16  # a folded column gets at least this much room
NUMBER = re.compile(r"-?\d+")
BOLD, YELLOW, RESET = "\x1b[1m", "\x1b[33m", "\x1b[0m"
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # C0 but the newline, DEL, C1


def visible(text: str) -> str:
    """``text`` with terminal control codes written out (``\\x1b``, ``\\x0d``): a producer's bytes never drive the screen."""
    return text if text.isprintable() else _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell_len(text: str) -> int:
    """Terminal cells of ``text``: its length for printable ASCII, else ``rich.cells``' measure (imported only then)."""
    if text.isascii() and text.isprintable():
        return len(text)
    from rich.cells import cell_len as cells

    return cells(text)


# a shell-quoted path with spaces in it is one word: copied whole; a quote opens only at a word's start, after an ``=`` or
# right after another quote, so an apostrophe ("segment's ... checkpoint's") quotes nothing
_WORD = re.compile(r"""(?:(?<![^\s'"=])'[^']*'|(?<![^\s'"=])"[^"]*"|\S)+""")


def _words(text: str) -> list[str]:
    """``text``'s words: split at spaces, but never inside quotes."""
    return _WORD.findall(text) if "'" in text or '"' in text else text.split()


_SUBCOMMAND = re.compile(r"[a-z]+(-[a-z]+)*")  # a subcommand's shape (``mqtool rebuild-cq``), whatever the command list holds
_ENDS = (",", ";", ")")  # punctuation after a command's last word in prose
_SPACED = re.compile(r"\S+")


def unit_spans(text: str, width: int) -> list[tuple[int, int]]:
    """(start, end) of ``text``'s words (``_WORD``'s), a command the reader pastes kept as one where it fits ``width``
    cells: from a word opening a backtick (after a bracket, if any) to the word closing it, or ``mqtool SUBCOMMAND ARG`` and the options after it
    (up to a word ending in ``,``, ``;`` or ``)``). A line broken inside a command pastes as two commands, the first run
    on its own; one wider than the line is broken at its spaces as any text, so that every line fits, unless a word of it
    is wider than the line (a long path): that line runs past the edge anyway, and the terminal's own wrap pastes whole."""
    spans = [m.span() for m in (_WORD if "'" in text or '"' in text else _SPACED).finditer(text)]
    if "mqtool" not in text:
        return spans
    units, i = [], 0
    while i < len(spans):
        word, last = text[spans[i][0] : spans[i][1]], i
        if word.lstrip("(").startswith("`") and word.count("`") == 1:  # `mqtool verify STORE` or (`mqtool ...
            last = next((k for k in range(i + 1, len(spans)) if "`" in text[spans[k][0] : spans[k][1]]), i)
        elif word == "mqtool" and i + 2 < len(spans) and _SUBCOMMAND.fullmatch(text[spans[i + 1][0] : spans[i + 1][1]]):
            last = i + 2
            while not text[spans[last][0] : spans[last][1]].endswith(_ENDS) and last + 1 < len(spans) and text[spans[last + 1][0]] == "-":
                last += 1
        if last == i or cell_len(text[spans[i][0] : spans[last][1]]) <= width or max(cell_len(text[a:b]) for a, b in spans[i : last + 1]) > width:
            units.append((spans[i][0], spans[last][1]))
        else:
            units += spans[i : last + 1]
        i = last + 1
    return units


def longest_word(text: str) -> int:
    return max((cell_len(w) for w in _words(text)), default=0)


def _extent(text: str) -> tuple[int, int]:
    """(cells of ``text``'s widest line, cells of its longest word)."""
    if text.isascii() and text.isprintable():  # one line, a cell per character (most cells)
        return len(text), len(text) if " " not in text else max(map(len, _words(text)), default=0)
    return max(cell_len(line) for line in text.split("\n")), longest_word(text)


def wrap(text: str, width: int, *, commands: bool = False) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken at spaces outside quotes (``commands``: nor inside a command,
    ``unit_spans``); newlines kept."""
    if len(text) <= width and " " not in text and text.isascii() and text.isprintable():
        return [text]  # one ASCII word that fits (most cells): what the loop below gives
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line, used = [], 0
        for word in [paragraph[s:e] for s, e in unit_spans(paragraph, width)] if commands else _words(paragraph):
            n = cell_len(word)
            if line and used + 1 + n > width:
                lines.append(" ".join(line))
                line, used = [], 0
            used += n + (1 if line else 0)
            line.append(word)
        lines.append(" ".join(line))
    return lines


def fold(text: str, width: int) -> list[str]:
    """``wrap``'s lines with every line wider than ``width`` broken into pieces of ``width`` cells."""
    lines = []
    for line in wrap(text, width):
        piece, used = "", 0
        for ch in line:
            n = cell_len(ch)
            if piece and used + n > width:
                lines.append(piece)
                piece, used = "", 0
            piece, used = piece + ch, used + n
        lines.append(piece)
    return lines


def line_spans(line: str, width: int) -> list[tuple[int, int]]:
    """(start, end) spans of the words (``unit_spans``) of each line ``line`` wraps into at ``width`` cells, continuations
    indented alike."""
    room = width - (len(line) - len(line.lstrip(" ")))
    spans: list[tuple[int, int]] = []
    start = end = None
    used = 0
    for s, e in unit_spans(line, room):
        n = cell_len(line[s:e])
        if start is not None and used + 1 + n > room:
            spans.append((start, end))
            start = None
        if start is None:
            start, used = s, n
        else:
            used += 1 + n
        end = e
    if start is not None:
        spans.append((start, end))
    return spans or [(0, 0)]


def pad(text: str, width: int, right: bool) -> str:
    gap = " " * max(width - cell_len(text), 0)
    return gap + text if right else text + gap


@dataclass
class Layout:
    """How a table is shown at a width: the visible columns and their widths, or vertical."""

    columns: list[int]  # indexes of the visible columns
    widths: list[int]
    vertical: bool = False
    dropped: list[str] = field(default_factory=list)


class Table:
    """A title, columns and rows of strings; ``optional`` (droppable, least important first), ``fold``, ``header``."""

    def __init__(self, columns: Sequence[str], *, title: str | None = None, optional: Sequence[str] = (), fold: Sequence[str] = (), header: bool = True):
        self.names = list(columns)
        unknown = [c for c in (*optional, *fold) if c not in self.names]
        if unknown:
            raise ValueError(f"optional or fold columns {unknown} are not columns of {self.names}")
        self.title, self.optional, self.fold, self.header = title, list(optional), list(fold), header
        self.rows: list[list[str]] = []

    def add_row(self, *cells) -> None:
        if len(cells) != len(self.names):
            raise ValueError(f"{len(cells)} cells for {len(self.names)} columns")
        # a cell is one value: its newlines written out too (``\\n``), else a body's lines would pass for rows or records
        self.rows.append(["" if c is None else visible(str(c)).replace("\n", "\\n") for c in cells])

    # ---- layout ---------------------------------------------------------------------------

    def _header_cells(self) -> list[str]:
        return self.names if self.header else ["" for _ in self.names]

    def _measure(self) -> tuple[list[int], list[int]]:
        """Each column's natural width (its widest line) and minimum width (its longest word)."""
        natural, minimum = [], []
        for i, name in enumerate(self._header_cells()):
            extents = [_extent(c) for c in [name] + [r[i] for r in self.rows]]
            natural.append(max(e[0] for e in extents))
            minimum.append(max(e[1] for e in extents))
        return natural, minimum

    def _surely_vertical(self, width: int) -> bool:
        """Whether the undroppable columns cannot fit ``width`` even at their headings' widths: vertical, cells unmeasured."""
        if not self.header:
            return False
        words = [longest_word(n) for n in self.names if n not in self.optional]
        if not words:
            return False
        words[-1] = min(words[-1], MIN_LAST)
        return sum(words) + GAP * (len(words) - 1) > width

    def _longest_word_within(self, i: int, limit: int) -> int:
        """Column ``i``'s longest word of at most ``limit`` cells (the longer ones run past the edge)."""
        cells = [self._header_cells()[i]] + [r[i] for r in self.rows]
        return max((n for c in cells for n in map(cell_len, _words(c)) if n <= limit), default=0)

    def layout(self, width: int, *, keep: Layout | None = None) -> Layout:
        """The layout at ``width``; ``keep``: a streamed table's previous layout, kept where it fits."""
        if (keep is not None and keep.vertical) or self._surely_vertical(width):
            return Layout([], [], vertical=True, dropped=[])
        natural, minimum = self._measure()
        if not self.header and natural and natural[0] <= (width - GAP) // 2:
            minimum[0] = natural[0]  # a key/value table's keys are labels: whole, the values wrap (rule 5)
        # the last column may overflow only with a word longer than a vertical record can hold (or,
        # squeezed, than half the width)
        room = self._vertical_value_width(width) if self.header else 0  # key/value tables never go vertical
        for capped, squeezed, folded in ((False, False, False), (True, False, False), (True, True, False), (True, True, True)):
            if folded and not self.fold:
                continue
            dropped = list(keep.dropped) if keep else []
            droppable = [c for c in self.optional if c not in dropped]
            while True:
                visible = [i for i, n in enumerate(self.names) if n not in dropped]
                mins = [minimum[i] for i in visible]
                if mins and capped and minimum[visible[-1]] > room:
                    # a last column whose words run past the edge anyway: squeezed, so do its words
                    # longer than half the width (rather than every row turning into a record)
                    mins[-1] = max(MIN_LAST, self._longest_word_within(visible[-1], min(room, width // 2) if squeezed else room))
                if folded and not droppable:  # folded only when leaving out columns was not enough
                    mins = self._folded(visible, mins, width)
                fits = bool(visible) and sum(mins) + GAP * (len(visible) - 1) <= width
                if fits or not droppable:
                    break
                dropped.append(droppable.pop(0))
            if fits:
                break
        else:
            if self.header:
                return Layout([], [], vertical=True)
            mins[-1] = max(width - sum(mins[:-1]) - GAP * (len(visible) - 1), 1)
        widths = self._distribute(mins, [natural[i] for i in visible], width - GAP * (len(visible) - 1))
        if keep is not None and keep.columns == visible:
            grown = [max(a, b) for a, b in zip(widths, keep.widths)]
            if sum(grown[:-1]) + mins[-1] + GAP * (len(visible) - 1) <= width:
                grown[-1] = min(grown[-1], width - GAP * (len(visible) - 1) - sum(grown[:-1]))
                widths = grown
        return Layout(visible, widths, dropped=dropped)

    def _folded(self, visible: list[int], mins: list[int], width: int) -> list[int]:
        """``mins`` with fold columns narrowed, widest first, by what the row lacks (to ``MIN_FOLD`` and the heading's word)."""
        mins = list(mins)
        excess = sum(mins) + GAP * (len(visible) - 1) - width
        for k in sorted((k for k, i in enumerate(visible) if self.names[i] in self.fold), key=lambda k: -mins[k]):
            if excess <= 0:
                break
            floor = max(MIN_FOLD, longest_word(self._header_cells()[visible[k]]))
            cut = min(excess, max(mins[k] - floor, 0))
            mins[k] -= cut
            excess -= cut
        return mins

    @staticmethod
    def _distribute(mins: list[int], natural: list[int], room: int) -> list[int]:
        """Widen the columns from their minimum: those that then fit whole first (narrowest need first), then the rest."""
        widths = list(mins)
        spare = room - sum(widths)
        for need, i in sorted((natural[i] - w, i) for i, w in enumerate(widths)):
            if 0 < need <= spare:
                widths[i] += need
                spare -= need
        while spare > 0:
            lacking = [(natural[i] - w, i) for i, w in enumerate(widths) if w < natural[i]]
            if not lacking:
                break
            _, i = max(lacking)
            widths[i] += 1
            spare -= 1
        return widths

    # ---- rendering ------------------------------------------------------------------------

    def render(self, layout: Layout, *, width: int, color: bool = False, show_header: bool = True, first_record: int = 1) -> list[str]:
        """The table's lines (without the title) in ``layout``."""
        if layout.vertical:
            return self._render_vertical(width, color, first_record)
        visible, widths = layout.columns, layout.widths
        right = [self._numeric(i) for i in visible]
        folds = [self.names[i] in self.fold for i in visible]
        lines: list[str] = []
        if self.header and show_header:
            head = self._row_lines([self.names[i] for i in visible], widths, right, folds)
            lines += [BOLD + h + RESET if color else h for h in head]
            lines.append("  ".join("-" * w for w in widths).rstrip())
        for row in self.rows:
            lines += self._row_lines([row[i] for i in visible], widths, right, folds)
        return lines

    def _numeric(self, i: int) -> bool:
        cells = [r[i] for r in self.rows if r[i] not in ("", "-")]
        return bool(cells) and all(NUMBER.fullmatch(c) for c in cells)

    @staticmethod
    def _row_lines(cells: list[str], widths: list[int], right: list[bool], folds: list[bool]) -> list[str]:
        wrapped = [(fold if f else wrap)(c, w) for c, w, f in zip(cells, widths, folds)]
        height = max(len(w) for w in wrapped)
        lines = []
        for k in range(height):
            parts = []
            for j, (cell, w) in enumerate(zip(wrapped, widths)):
                text = cell[k] if k < len(cell) else ""
                last = j == len(widths) - 1
                parts.append(pad(text, w, right[j]) if (right[j] or not last) else text)
            lines.append((" " * GAP).join(parts).rstrip())
        return lines

    def _vertical_value_width(self, width: int) -> int:
        return max(width - max((cell_len(n) for n in self._header_cells()), default=0) - 3, MIN_LAST)

    def _render_vertical(self, width: int, color: bool, first_record: int) -> list[str]:
        labels = self._header_cells()
        label_width = max((cell_len(n) for n in labels), default=0)
        value_width = self._vertical_value_width(width)
        padded, blank = [pad(label, label_width, False) + " | " for label in labels], " " * label_width + " | "
        lines = []
        for k, row in enumerate(self.rows):
            wrapped = [wrap(v, value_width) for v in row]
            longest = max((cell_len(line) for value in wrapped for line in value), default=0)
            banner = f"-[ RECORD {first_record + k} ]".ljust(label_width + 1, "-") + "+"
            banner += "-" * max(min(width, label_width + 3 + longest) - len(banner), 1)
            lines.append(BOLD + banner + RESET if color else banner)
            for label, value in zip(padded, wrapped):
                for j, text in enumerate(value):
                    lines.append(((label if j == 0 else blank) + text).rstrip())
        return lines
