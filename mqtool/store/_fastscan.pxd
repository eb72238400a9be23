# The commit log walk and the resynchronisation, for compiled modules that ``cimport`` them
# (``store/_dledgerwalk.pyx`` walks the record inside each DLedger entry with ``walk_records``).

from libc.stdint cimport int64_t, uint8_t

cpdef enum:
    # walk result codes
    OK_BLANK = 0  # a blank record: the segment ends here
    END_ZEROS = 1
    END_CORRUPT = 2
    END_TRUNCATED = 3
    END_LENGTH_MISMATCH = 4
    END_CRC = 5
    END_SEGMENT = 6  # a record ended exactly at the end of the buffer
    END_LIMIT = 7  # reached ``stop``
    END_CAPACITY = 8  # the output arrays are full; call again from the returned position
    # columns of the ``out`` rows, one row per valid record (positions are buffer positions)
    COL_POS = 0
    COL_SIZE = 1
    COL_BODY = 2
    COL_BODY_LEN = 3
    COL_TOPIC = 4
    COL_PROPS = 5
    COL_CRC_OK = 6
    N_COLS = 7

cdef struct Walk:
    Py_ssize_t count  # rows written
    Py_ssize_t pos  # where the walk ended
    int code  # ``OK_BLANK`` or an ``END_*``
    int64_t detail  # TOTALSIZE for a blank, a length mismatch or a CRC failure, else 0

cdef Walk walk_records(const uint8_t* b, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t stop, bint check_crc, bint stop_on_crc, int64_t* out, Py_ssize_t capacity) noexcept nogil
