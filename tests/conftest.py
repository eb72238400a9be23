"""Shared fixtures: the real-broker stores in fixtures/ and their manifests."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
VERSIONS = ("4.8.0", "4.9.7", "5.3.3")
MAIN_VERSIONS = ("4.9.7", "5.3.3")
# every version with a config-real store (the broker's own config files) and a batch-small store
CONFIG_VERSIONS = ("4.9.2", "4.9.7", "5.0.0", "5.3.3")
BATCH_VERSIONS = ("4.9.2", "4.9.7", "5.0.0")
# every version with real-broker stores here, oldest first: the tests that hold each era's rules
ALL_VERSIONS = tuple(sorted((p.name.removeprefix("rocketmq-") for p in FIXTURES.glob("rocketmq-*")), key=lambda v: tuple(map(int, v.split(".")))))

sys.path.insert(0, str(FIXTURES))
from unpack import unpack  # noqa: E402  (the fixture files kept gzipped: fixtures/unpack.py)

unpack()
sys.path.remove(str(FIXTURES))

# Bytecode written (as on a user's machine) even where PYTHONDONTWRITEBYTECODE is set: the hundreds of
# `python -m mqtool` runs and Spark workers the tests start, and each pytest-xdist worker's rewrite of
# the test modules, then compile once rather than at every start.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def drained(fd: int) -> bytes:
    """All a pty's master ``fd`` gives until its other side closes (EIO) or it ends."""
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def memory_temproot(need: int = 2 << 30) -> str | None:
    """``/dev/shm`` where it is a memory file system (tmpfs) with ``need`` bytes free, else None."""
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts if line)
    return "/dev/shm" if tmpfs and os.access("/dev/shm", os.W_OK) and st.f_bavail * st.f_frsize >= need else None


def other_file_system(path: Path) -> str | None:
    """A writable folder on another file system than ``path``'s (``/dev/shm``, the checkout's, ``/tmp``), or None."""
    here = os.stat(path).st_dev
    places = (memory_temproot(0), str(ROOT.parent), "/tmp")
    return next((d for d in places if d and os.path.isdir(d) and os.access(d, os.W_OK) and os.stat(d).st_dev != here), None)


@pytest.fixture
def second_disk(tmp_path):
    """A directory on another file system than ``tmp_path``'s (``/dev/shm``, or the checkout's when
    ``tmp_path`` is there), for a store folder linked to another disk; removed afterwards."""
    import tempfile

    other = other_file_system(tmp_path)
    if other is None:
        pytest.skip("no second file system to link a store folder to")
    disk = Path(tempfile.mkdtemp(dir=other, prefix="mqtool-test-"))
    yield disk
    shutil.rmtree(disk, ignore_errors=True)


def pytest_configure(config):
    """The tests' temporary directories (``tmp_path``: numbered, rotated and removed as pytest does,
    pyproject's ``tmp_path_retention_policy``) in memory where there is room: the repairs, restores
    and plans the tests apply fsync every file and directory they write (``apply/``), which on a disk
    waits longer than the tests compute. The calls still run; only the wait goes. ``--basetemp`` or
    ``PYTEST_DEBUG_TEMPROOT`` given: theirs."""
    if config.option.basetemp is None and "PYTEST_DEBUG_TEMPROOT" not in os.environ and (root := memory_temproot()):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = root
    # Ctrl-C as a shell gives it: pytest-xdist's workers start with SIGINT ignored, which a command the tests start inherits
    # (an ignored signal stays ignored across exec), so the Ctrl-C tests passed or failed by which worker ran them (the one
    # whose Spark tests had installed a handler of their own, or the other)
    signal.signal(signal.SIGINT, signal.default_int_handler)


TIMING_FIELDS = {"elapsed_s", "throughput_bytes_per_s", "created_ms"}  # the run itself, not the store


def without_timings(text: str):
    """A command's JSON (or JSON Lines) output without the fields that time the run."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING_FIELDS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    try:
        return strip(json.loads(text))
    except json.JSONDecodeError:
        return [strip(json.loads(line)) for line in text.splitlines() if line.strip()]


def run_loading(argv: list[str], probed, *, env: dict | None = None, packages: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``mqtool argv`` in a fresh interpreter, and which of ``probed`` it had loaded when it
    exited, sorted: module names, or with ``packages`` top-level package names."""
    names = "{m.split('.')[0] for m in sys.modules}" if packages else "set(sys.modules)"
    code = (f"import atexit, sys; atexit.register(lambda: print(sorted({names} & {set(probed)!r}), file=sys.stderr));"
            f"from mqtool.cli import main; sys.argv = ['mqtool', *{list(argv)!r}]; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return proc, json.loads(proc.stderr.strip().splitlines()[-1].replace("'", '"'))


@contextlib.contextmanager
def python_lock_calls(files: tuple[str, ...] = ("threading.py", "queue.py")):
    """The names of the functions of ``files`` this thread enters inside the block: a wait a
    Ctrl-C can leave half done takes a Python-level lock there (``threading.Condition``); one in
    C (``SimpleQueue.get``, ``Thread.join``'s lock) is all or nothing."""
    entered: set[str] = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(files):
            entered.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(None)


def store_path(version: str, name: str) -> Path:
    return FIXTURES / f"rocketmq-{version}" / name


@lru_cache(maxsize=None)
def manifest(version: str, name: str) -> dict:
    return json.loads((FIXTURES / f"rocketmq-{version}" / f"{name}.manifest.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def recovered(version: str, name: str) -> dict:
    return json.loads((FIXTURES / f"rocketmq-{version}" / f"{name}.recovered.json").read_text(encoding="utf-8"))


def copy_store(version: str, name: str, dest: Path) -> Path:
    """A writable copy of a fixture store (fixtures themselves are never modified)."""
    target = dest / f"{version}-{name}"
    shutil.copytree(store_path(version, name), target)
    for dirpath, dirnames, filenames in os.walk(target):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return target


def fixture_version(store_dir: Path) -> str:
    """The broker version of a ``copy_store`` copy (its folder is named ``<version>-<store>``): the tests
    that hold one version's rules give it, since detection may leave several eras (``store.version``)."""
    return Path(store_dir).name.split("-", 1)[0]


@pytest.fixture
def store_copy(tmp_path):
    return lambda version, name: copy_store(version, name, tmp_path)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession for every Spark test (its JVM takes seconds to start). Its JIT stops at
    the quick compiler (C1): the tests' short jobs never repay C2's compiling (40% of the JVM's CPU)."""
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("mqtool-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


SPARK_FILES = ("tests/test_dledger_spark.py", "tests/test_spark_job.py")  # the files whose tests use ``spark``
# few tests, long ones: an apply killed at every durability point; a benchmark store built (its filler compiled where numba is
# installed); every command's --help run as a user runs it. Handed out last (by their count of tests), one could end the run alone
LONG_FILES = ("tests/test_apply_crash.py", "tests/test_verify_bench_store.py", "tests/test_docs.py")


def pytest_collection_modifyitems(config, items):
    """On a pytest-xdist worker, the order the files are handed out in (each file's tests kept
    together and in order): Spark's files first, so the longest unit of work starts at once rather
    than ending the run alone, then ``LONG_FILES`` (last by their count of tests, they ended it),
    then the files with the most tests, as xdist would order them."""
    if hasattr(config, "workerinput"):
        file = lambda item: item.nodeid.split("::")[0]  # noqa: E731
        tests = Counter(map(file, items))
        items.sort(key=lambda item: (file(item) not in SPARK_FILES, file(item) not in LONG_FILES, -tests[file(item)], file(item)))


if importlib.util.find_spec("xdist"):

    def pytest_xdist_make_scheduler(config, log):
        """``--dist loadfile`` with Spark's files one unit of work (one worker, one JVM), handed out
        in the order the workers collected them (``pytest_collection_modifyitems``)."""
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class SparkTogether(LoadFileScheduling):
            def _split_scope(self, nodeid):
                scope = super()._split_scope(nodeid)
                return "spark" if scope in SPARK_FILES else scope

        config.option.loadscopereorder = False
        return SparkTogether(config, log)


@pytest.fixture
def ahead_on_small_segments(monkeypatch):
    """The fixtures' 1 MiB segments are below ``dispatch.AHEAD_MIN_SEGMENT``: dispatch them ahead
    all the same, for the tests that hold the work ahead equal to the walk in turn."""
    from mqtool.dispatch import scanner as dispatch

    monkeypatch.setattr(dispatch, "AHEAD_MIN_SEGMENT", 0)


@pytest.fixture
def log_walk_starts(monkeypatch):
    """The walks of the commit log that start in its first segment, each named by the function that began it: every
    ``fastscan.FastScan`` made to start there (``LogStream``, ``MessageScan``, the DLedger check's walk of its first file, a
    dispatch scan) and the commit log check's ``analyze_segment`` of the first segment (``verify.commitlog``). A walk going
    on from a later segment (past damage, the next DLedger file) is the same walk, not counted."""
    import mqtool.verify.commitlog as log_check
    from mqtool.store import fastscan

    starts: list[str] = []
    made, analyze = fastscan.FastScan.__init__, log_check.analyze_segment

    def counted_init(self, commitlog, start=None, stop=None, **kw):
        if commitlog.segments and (start is None or start < commitlog.segments[0].end_offset):
            starts.append(sys._getframe(1).f_code.co_name)
        made(self, commitlog, start, stop, **kw)

    def counted_analyze(task, *args, **kw):
        if task.index == 0:
            starts.append("analyze_segment")
        return analyze(task, *args, **kw)

    monkeypatch.setattr(fastscan.FastScan, "__init__", counted_init)
    monkeypatch.setattr(log_check, "analyze_segment", counted_analyze)
    return starts


def parse_host(text: str) -> tuple[bytes, int]:
    """``ip:port`` (IPv6 in brackets, compressed or Java's long form) as address bytes and port."""
    import ipaddress

    host, _, port = text.rpartition(":")
    return ipaddress.ip_address(host.strip("[]")).packed, int(port)


def stderr_on_a_terminal(args, columns: int = 100, stdout_file: Path | None = None) -> tuple[str, str]:
    """Run mqtool with stderr on a pseudo-terminal and stdout into a pipe (`mqtool ... | head`), or
    into ``stdout_file`` (`mqtool ... > plan.txt`): (what the terminal shows from stderr, stdout)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    with open(stdout_file, "wb") if stdout_file is not None else contextlib.nullcontext(subprocess.PIPE) as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "mqtool", *map(str, args)], stdin=slave, stdout=stdout, stderr=slave, env=env, cwd=ROOT, close_fds=True)
        os.close(slave)
        out = proc.stdout.read().decode() if stdout_file is None else ""
        shown = drained(master)
        proc.wait(timeout=300)
    os.close(master)
    return shown.decode("utf-8", "replace"), out if stdout_file is None else Path(stdout_file).read_text()


def terminal_run(args, columns: int = 100, env=None, timeout: int = 300, *, program: str | None = None,
                 type_when: tuple[bytes, bytes] | None = None) -> tuple[int, str]:
    """Run mqtool (or the Python ``program`` given ``args``) with stdin, stdout and stderr on a pseudo-terminal of ``columns`` x 40:
    its exit code and output. ``type_when=(shown, keys)``: ``keys`` typed once the output holds ``shown``, the terminal the
    process's controlling one (as a shell's foreground job's: a typed Ctrl-C echoes ``^C`` and sends SIGINT)."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")} | {"TERM": "xterm-256color"} | (env or {})
    argv = [sys.executable, *(("-c", program) if program is not None else ("-m", "mqtool")), *map(str, args)]
    controlling = {"start_new_session": True, "preexec_fn": lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)} if type_when else {}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=environ, close_fds=True, **controlling)
    os.close(slave)
    raw = b""
    while select.select([master], [], [], timeout)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        raw += data
        if type_when is not None and type_when[0] in raw:
            os.write(master, type_when[1])
            type_when = None
    code = proc.wait(timeout=timeout)
    os.close(master)
    return code, raw.decode("utf-8", "replace").replace("\r\n", "\n")
