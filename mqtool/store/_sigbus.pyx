"""The SIGBUS handlers ``mappedfile.exit_on_sigbus`` installs, compiled: plain C functions that run
no Python and take no lock.

A faulting read re-executes when a handler returns, so Python's ``signal`` module cannot end it.
These handlers are installed with ``sigaction(2)`` and run on whichever thread takes the signal, a
thread in a ``nogil`` loop or the pool's result thread included; each calls only async-signal-safe
``open(2)``, ``read(2)``, ``write(2)``, ``kill(2)`` and ``_exit(2)`` and never returns. A callback
that runs Python would first have to take the GIL, which a thread interrupted in the interpreter's
own lock may never give back (a hang instead of the exit). The line names the file mapped at the
faulting address, looked up in ``/proc/self/maps`` and quoted as ``shlex.quote`` does; a SIGBUS sent
by ``kill`` has no address and is said with the generic subject. A worker process (``verify --jobs``)
sends SIGBUS to its parent instead, whose handler prints and exits."""

from libc.stdlib cimport malloc
from libc.string cimport memcpy


cdef extern from "<signal.h>" nogil:
    ctypedef struct siginfo_t:
        int si_code
        void *si_addr
    ctypedef struct sigset_t:
        pass
    cdef struct sigaction_t "sigaction":
        void (*sa_sigaction)(int, siginfo_t *, void *)
        sigset_t sa_mask
        int sa_flags
    int sigaction(int signum, const sigaction_t *act, sigaction_t *oldact)
    int sigemptyset(sigset_t *mask)
    int kill(int pid, int sig)
    int SIGBUS
    int SA_SIGINFO

cdef extern from "<fcntl.h>" nogil:
    int open(const char *path, int flags)
    int O_RDONLY

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int fd, void *buf, size_t count)
    ssize_t write(int fd, const void *buf, size_t count)
    int close(int fd)
    void _exit(int status)
    int getppid()


cdef char *_before = NULL  # "mqtool: error: "
cdef size_t _before_length = 0
cdef char *_after = NULL  # " could not be read ...; what to do\n"
cdef size_t _after_length = 0
cdef char *_subject = NULL  # said where no mapped file is found: "a store file"
cdef size_t _subject_length = 0
cdef int _status = 0

cdef enum:
    LINE = 8192  # a line of /proc/self/maps: addresses, fields and a path of up to PATH_MAX
cdef char _line[LINE]
cdef char _chunk[4096]


cdef size_t _hex(const char *text, size_t n, size_t *at, size_t *value) noexcept nogil:
    """The hexadecimal number at ``text[*at]``, ``*at`` moved past it; the count of its digits."""
    cdef size_t digits = 0
    cdef char c
    value[0] = 0
    while at[0] < n:
        c = text[at[0]]
        if c'0' <= c <= c'9':
            value[0] = value[0] * 16 + <size_t>(c - c'0')
        elif c'a' <= c <= c'f':
            value[0] = value[0] * 16 + <size_t>(c - c'a' + 10)
        else:
            break
        at[0] += 1
        digits += 1
    return digits


cdef bint _mapped_path(size_t n, size_t address, size_t *start, size_t *length) noexcept nogil:
    """Whether the maps line ``_line[:n]`` maps ``address`` to a file: its path's place in ``_line``."""
    cdef size_t at = 0, low = 0, high = 0, field = 0
    if not _hex(_line, n, &at, &low) or at >= n or _line[at] != c'-':
        return False
    at += 1
    if not _hex(_line, n, &at, &high) or not (low <= address < high):
        return False
    while field < 4 and at < n:  # permissions, offset, device, inode
        while at < n and _line[at] == c' ':
            at += 1
        while at < n and _line[at] != c' ':
            at += 1
        field += 1
    while at < n and _line[at] == c' ':
        at += 1
    if at >= n or _line[at] != c'/':  # anonymous, or [heap], [stack]
        return False
    start[0], length[0] = at, n - at
    return True


cdef bint _safe(char c) noexcept nogil:
    """A byte ``shlex.quote`` leaves unquoted."""
    return (c'a' <= c <= c'z') or (c'A' <= c <= c'Z') or (c'0' <= c <= c'9') or c in b'@%+=:,./-_'


cdef void _write_quoted(const char *path, size_t n) noexcept nogil:
    """``path`` on stderr as ``shlex.quote`` gives it: as it is, or in single quotes, each ``'`` as ``'"'"'``."""
    cdef size_t i, run = 0
    for i in range(n):
        if not _safe(path[i]):
            break
    else:
        write(2, path, n)
        return
    write(2, b"'", 1)
    for i in range(n + 1):
        if i == n or path[i] == c"'":
            write(2, path + run, i - run)
            if i < n:
                write(2, b"'\"'\"'", 5)
            run = i + 1
    write(2, b"'", 1)


cdef bint _write_mapped_file(size_t address) noexcept nogil:
    """The path of the file mapped at ``address`` (``/proc/self/maps``) on stderr, quoted; False where none is found."""
    cdef int fd = open(b"/proc/self/maps", O_RDONLY)
    cdef ssize_t got
    cdef size_t n = 0, i, start = 0, length = 0
    cdef bint found = False
    if fd < 0:
        return False
    while not found:
        got = read(fd, _chunk, sizeof(_chunk))
        if got <= 0:
            break
        for i in range(<size_t>got):
            if _chunk[i] == c'\n':
                if _mapped_path(n, address, &start, &length):
                    found = True
                    break
                n = 0
            elif n < LINE:
                _line[n] = _chunk[i]
                n += 1
    close(fd)
    if found:
        _write_quoted(_line + start, length)
    return found


cdef void _print_and_exit(int signum, siginfo_t *info, void *context) noexcept nogil:
    write(2, _before, _before_length)
    if info == NULL or info.si_code <= 0 or not _write_mapped_file(<size_t>info.si_addr):  # si_code <= 0: sent by kill()
        write(2, _subject, _subject_length)
    write(2, _after, _after_length)
    _exit(_status)


cdef void _to_parent_and_exit(int signum, siginfo_t *info, void *context) noexcept nogil:
    kill(getppid(), signum)
    _exit(_status)


cdef char *_copy(bytes text) except NULL:
    cdef char *copy = <char *> malloc(len(text) or 1)
    if copy == NULL:
        raise MemoryError()
    memcpy(copy, <const char *> text, len(text))
    return copy


def install(bytes before, bytes subject, bytes after, int status, bint worker):
    """Install the handler for SIGBUS: print ``before``, the mapped file's path (else ``subject``) and ``after``, and exit with
    ``status`` (``worker``: hand the signal to the parent, then exit). The texts are copied into memory that is never freed."""
    global _before, _before_length, _subject, _subject_length, _after, _after_length, _status
    cdef sigaction_t action
    _before, _subject, _after = _copy(before), _copy(subject), _copy(after)
    _before_length, _subject_length, _after_length, _status = len(before), len(subject), len(after), status
    sigemptyset(&action.sa_mask)
    action.sa_flags = SA_SIGINFO
    action.sa_sigaction = _to_parent_and_exit if worker else _print_and_exit
    sigaction(SIGBUS, &action, NULL)
