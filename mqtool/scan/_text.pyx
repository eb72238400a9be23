"""Compiled kernel of ``text.py``: a batch's rows as JSON Lines, JSON array items or CSV rows,
written straight into one output buffer, row by row: the constant text between cells and each
cell from the column's Arrow buffers, plain runs of string bytes copied a word at a time
(``_bytes.pxd``'s ``copy_words``). The bytes equal ``json.dumps(row, ensure_ascii=False)`` and
``csv.writer`` (``mqtool/cli/output.py``); ``tests/test_scan_text.py`` holds them equal."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc

from mqtool.store._bytes cimport WORD_SLACK, copy_words, has_byte, has_byte_below, load8
from mqtool.scan._format cimport LOWER_HEX, put_int

cdef enum:
    QUOTE = 34
    BACKSLASH = 92
    COMMA = 44
    NEWLINE = 10
    # a column's kind: how the kernel writes its cells (``text.py`` names them)
    KIND_INT = 0
    KIND_BOOL = 1
    KIND_STRING = 2
    KIND_LIST = 3
    KIND_MAP = 4

KINDS = (KIND_INT, KIND_BOOL, KIND_STRING, KIND_LIST, KIND_MAP)
OUT_SLACK = WORD_SLACK  # bytes ``render`` may write past the text: ``out`` and every table need them


cdef inline Py_ssize_t _put(uint8_t* out, Py_ssize_t k, uint8_t byte, bint doubled) noexcept nogil:
    """One byte; a quote twice when ``doubled`` (JSON text inside a CSV cell)."""
    out[k] = byte
    if doubled and byte == QUOTE:
        out[k + 1] = QUOTE
        return k + 2
    return k + 1


cdef Py_ssize_t _put_json_string(uint8_t* out, Py_ssize_t k, const uint8_t* data, Py_ssize_t data_len, Py_ssize_t s, Py_ssize_t e, bint doubled) noexcept nogil:
    """``json.dumps(str, ensure_ascii=False)`` of UTF-8 ``data[s:e]`` at ``out[k:]`` (quotes
    doubled when ``doubled``)."""
    cdef Py_ssize_t run = s, p = s
    cdef uint64_t x
    cdef uint8_t c
    k = _put(out, k, QUOTE, doubled)
    while p < e:
        if p + 8 <= e:
            x = load8(data, p)
            if not (has_byte_below(x, 32) or has_byte(x, QUOTE) or has_byte(x, BACKSLASH)):
                p += 8
                continue
        c = data[p]
        p += 1
        if c >= 32 and c != QUOTE and c != BACKSLASH:
            continue
        k = copy_words(out, k, data, data_len, run, p - 1 - run)
        run = p
        out[k] = BACKSLASH
        if c == QUOTE or c == BACKSLASH:
            k = _put(out, k + 1, c, doubled)
        elif c == 10 or c == 13 or c == 9 or c == 8 or c == 12:
            out[k + 1] = 110 if c == 10 else 114 if c == 13 else 116 if c == 9 else 98 if c == 8 else 102
            k += 2
        else:
            out[k + 1] = 117  # u00XX
            out[k + 2] = 48
            out[k + 3] = 48
            out[k + 4] = LOWER_HEX[c >> 4]
            out[k + 5] = LOWER_HEX[c & 15]
            k += 6
    k = copy_words(out, k, data, data_len, run, e - run)
    return _put(out, k, QUOTE, doubled)


cdef Py_ssize_t _put_csv_cell(uint8_t* out, Py_ssize_t k, const uint8_t* data, Py_ssize_t data_len, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """``csv.writer`` (QUOTE_MINIMAL) of ``data[s:e]``: quoted, quotes doubled, when it holds a
    comma, a quote or a newline."""
    cdef Py_ssize_t p = s, q
    cdef uint64_t x
    cdef uint8_t c
    while p + 8 <= e:
        x = load8(data, p)
        if has_byte(x, COMMA) or has_byte(x, QUOTE) or has_byte(x, NEWLINE):
            break
        p += 8
    while p < e:
        c = data[p]
        if c == COMMA or c == QUOTE or c == NEWLINE:
            out[k] = QUOTE
            k = copy_words(out, k + 1, data, data_len, s, p - s)
            for q in range(p, e):
                k = _put(out, k, data[q], True)
            out[k] = QUOTE
            return k + 1
        p += 1
    return copy_words(out, k, data, data_len, s, e - s)


cdef struct Strings:
    const int32_t* offsets
    const uint8_t* data
    Py_ssize_t size  # bytes in ``data`` (``copy_words`` copies exactly near its end)


def render(Py_ssize_t n, const int64_t[::1] kinds, const int64_t[:, ::1] slots, const int64_t[:, ::1] ints, const uint8_t[:, ::1] valid,
           const int64_t[::1] words_offsets, const uint8_t[::1] words, tuple str_offsets, tuple str_data, tuple nest_offsets,
           const int64_t[::1] piece_offsets, const uint8_t[::1] pieces, bint csv, uint8_t[::1] out):
    """Rows of text into ``out``: piece 0, cell 0 of the row, piece 1, cell 1, ..., the last
    piece; returns the length written. Column ``c`` is of kind ``kinds[c]``: ``KIND_INT`` and
    ``KIND_BOOL`` read ``ints[slots[c, 0]]``, ``KIND_STRING`` the strings ``slots[c, 0]`` of
    ``str_offsets``/``str_data`` (int32 offsets, uint8 data), ``KIND_LIST`` the lists
    ``nest_offsets[slots[c, 0]]`` of strings ``slots[c, 1]``, ``KIND_MAP`` the maps
    ``nest_offsets[slots[c, 0]]`` of keys ``slots[c, 1]`` and values ``slots[c, 2]``;
    ``valid[c]`` is false for a null. ``words``: false, true, null. ``out`` must hold the text
    and ``WORD_SLACK`` bytes more."""
    cdef Py_ssize_t columns = kinds.shape[0], strings = len(str_offsets), nests = len(nest_offsets)
    cdef Py_ssize_t i, c, j, k = 0, item, first, last, w
    cdef int64_t kind
    cdef bint quoted
    cdef const int32_t[::1] o
    cdef const uint8_t[::1] d
    cdef Strings s, keys, values
    cdef const int32_t* nest
    cdef uint8_t* dst = &out[0]
    cdef const uint8_t* piece = &pieces[0]
    cdef const uint8_t* word = &words[0]
    cdef Py_ssize_t pieces_len = pieces.shape[0], words_len = words.shape[0]
    cdef Strings* table = <Strings*>malloc(strings * sizeof(Strings))
    cdef const int32_t** nest_table = <const int32_t**>malloc(nests * sizeof(int32_t*))
    if table == NULL or nest_table == NULL:
        free(table)
        free(nest_table)
        raise MemoryError()
    try:
        for j in range(strings):
            o = str_offsets[j]
            d = str_data[j]
            table[j].offsets = &o[0]
            table[j].data = &d[0]
            table[j].size = d.shape[0]
        for j in range(nests):
            o = nest_offsets[j]
            nest_table[j] = &o[0]
        with nogil:
            for i in range(n):
                for c in range(columns):
                    k = copy_words(dst, k, piece, pieces_len, piece_offsets[c], piece_offsets[c + 1] - piece_offsets[c])
                    kind = kinds[c]
                    if not valid[c, i] or kind == KIND_BOOL:
                        w = 2 if not valid[c, i] else ints[slots[c, 0], i]
                        k = copy_words(dst, k, word, words_len, words_offsets[w], words_offsets[w + 1] - words_offsets[w])
                    elif kind == KIND_INT:
                        k = put_int(dst, k, ints[slots[c, 0], i])
                    elif kind == KIND_STRING:
                        s = table[slots[c, 0]]
                        if csv:
                            k = _put_csv_cell(dst, k, s.data, s.size, s.offsets[i], s.offsets[i + 1])
                        else:
                            k = _put_json_string(dst, k, s.data, s.size, s.offsets[i], s.offsets[i + 1], False)
                    else:
                        nest = nest_table[slots[c, 0]]
                        first = nest[i]
                        last = nest[i + 1]
                        quoted = csv and last > first  # the JSON text holds quotes: csv.writer quotes it
                        if quoted:
                            dst[k] = QUOTE
                            k += 1
                        dst[k] = 91 if kind == KIND_LIST else 123  # [ or {
                        k += 1
                        keys = table[slots[c, 1]]
                        values = table[slots[c, 2]]
                        for item in range(first, last):
                            if item > first:
                                dst[k] = COMMA
                                dst[k + 1] = 32
                                k += 2
                            k = _put_json_string(dst, k, keys.data, keys.size, keys.offsets[item], keys.offsets[item + 1], quoted)
                            if kind == KIND_MAP:
                                dst[k] = 58  # :
                                dst[k + 1] = 32
                                k = _put_json_string(dst, k + 2, values.data, values.size, values.offsets[item], values.offsets[item + 1], quoted)
                        dst[k] = 93 if kind == KIND_LIST else 125  # ] or }
                        k += 1
                        if quoted:
                            dst[k] = QUOTE
                            k += 1
                k = copy_words(dst, k, piece, pieces_len, piece_offsets[columns], piece_offsets[columns + 1] - piece_offsets[columns])
    finally:
        free(table)
        free(nest_table)
    return k
