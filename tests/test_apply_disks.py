"""A store split over file systems, and owned by the broker's user: ``repair`` and ``restore`` where
``consumequeue/`` and ``index/`` (or ``commitlog/``) are links to another disk, where a rename from the
staging folder fails (EXDEV), and the owner and mode of every file they write; a disk that refuses a write
part-way, and special files (FIFOs, sockets, device nodes) in the store (docs/recovery.md, "Crash safety")."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import copy_store
from test_apply_crash import damaged_store, plan_given_version, plan_of
from typer.testing import CliRunner

import mqtool.fileops as fileops
from mqtool.apply import apply_plan
from mqtool.apply.backup import STAGING_DIR
from mqtool.cli import app
from repair_support import Killed, every_kill_point, tree

BROKER = (1234, 2345)  # the broker's user and group; the tests run as root, as an operator does


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def split(store: Path, disk: Path, folders: tuple[str, ...]) -> Path:
    """``folders`` of ``store`` moved to ``disk`` and linked back, as an operator puts them on another disk."""
    disk.mkdir(parents=True, exist_ok=True)
    for name in folders:
        shutil.move(store / name, disk / name)
        (store / name).symlink_to(disk / name)
    return store


def both(store: Path, disk: Path) -> dict[str, str]:
    return {**tree(store), **{f"disk:{k}": v for k, v in tree(disk).items()}}


def short_segment(tmp_path: Path) -> Path:
    """clean-small with its last commit log segment cut short: ``repair`` resizes it (a whole file written anew)."""
    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    last = sorted((store / "commitlog").iterdir())[-1]
    os.truncate(last, 1000000)
    return store


def test_segments_that_are_symlinks_are_repaired_through_the_link_and_restored_exactly(tmp_path, second_disk):
    """Two short segments kept elsewhere through a symlink each (one on this disk, one on another). Before, ``repair``
    refused, "`mqtool repair` fixes the file first" (its file fixes passed symlinks over), and had it resized one, the
    file would have replaced the link, and the backup was a hard link to the symlink itself, whose bytes ``restore`` then
    read as the repaired file's. Now the linked files are resized through their links and ``restore`` gives back each
    file's bytes with the links as they were."""
    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    here = tmp_path / "here"
    here.mkdir()
    segments = sorted((store / "commitlog").iterdir())
    for segment, disk, size in ((segments[-1], second_disk, 500000), (segments[-2], here, 700000)):
        shutil.move(segment, disk / segment.name)
        segment.symlink_to(disk / segment.name)
        os.truncate(disk / segment.name, size)
    before = {**both(store, second_disk), **{f"here:{k}": v for k, v in tree(here).items()}}
    done = run("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0, done.stderr
    assert all(s.is_symlink() and s.stat().st_size == 1 << 20 for s in segments[-2:])
    assert run("verify", store).exit_code == 0
    assert run("restore", tmp_path / "backup", "--yes").exit_code == 0
    assert all(s.is_symlink() for s in segments[-2:])
    assert {**both(store, second_disk), **{f"here:{k}": v for k, v in tree(here).items()}} == before


def test_a_segment_that_is_a_symlink_recover_deletes_is_put_back_as_the_link(tmp_path, second_disk):
    """4.9.7 ``clean-small`` cut by a bad body CRC in its third segment: ``recover`` deletes the two segments after it
    (``truncateDirtyFiles``), the last a symlink to another disk. Before, the link was deleted with its bytes copied into
    the backup, and ``restore`` put back a regular file in its place (the layout changed, the linked file left beside
    it). Now the link moves into the backup as it is (the broker's ``File.delete`` removes the link, not its file) and
    ``restore`` puts it back."""
    from test_next_start import flip_body_in_third_segment

    from conftest import manifest

    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    flip_body_in_third_segment(store, manifest("4.9.7", "clean-small"))
    last = sorted((store / "commitlog").iterdir())[-1]
    shutil.move(last, second_disk / last.name)
    last.symlink_to(second_disk / last.name)
    before = both(store, second_disk)
    done = run("recover", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert done.exit_code in (0, 1), done.stderr
    assert not os.path.lexists(last) and (second_disk / last.name).is_file()  # the link deleted, as the broker deletes it
    assert run("restore", tmp_path / "backup", "--yes").exit_code == 0
    assert last.is_symlink() and os.readlink(last) == str(second_disk / last.name)
    assert both(store, second_disk) == before


@pytest.mark.parametrize("damage, folders", [(damaged_store, ("consumequeue", "index")), (short_segment, ("commitlog",))])
def test_repair_and_restore_of_a_store_whose_folders_are_on_another_disk(tmp_path, second_disk, damage, folders):
    """Before, the rename of each rebuilt consume queue and index file (or of the resized segment) from
    ``<store>/.mqtool-staging/`` into the linked folder failed with "Invalid cross-device link": the
    repair stopped half-done (exit 3), every time it was run again. Now each is copied beside its
    target and renamed over it; the repaired store is sound and ``restore`` gives back every byte."""
    store = split(damage(tmp_path), second_disk, folders)
    before = both(store, second_disk)
    done = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0, done.stderr
    assert both(store, second_disk) != before
    assert run("verify", store).exit_code == 0
    assert not [p for p in second_disk.rglob("*") if fileops.TMP_SUFFIX in p.name]
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert both(store, second_disk) == before


def test_every_kill_point_of_an_apply_onto_another_disk_converges_and_restores(tmp_path, second_disk, monkeypatch):
    """Killed at each durability point, and inside the copy of a file across file systems (its copy
    beside the target written, not yet renamed), an apply into linked folders is finished by running it
    again and undone by ``restore``, with no temporary file left in the linked folders."""
    def fresh(name):
        return split(damaged_store(tmp_path, name), second_disk / name, ("consumequeue", "index"))

    def state(store):
        return both(store, second_disk / store.parent.name)

    reference = fresh("reference")
    original = state(reference)
    apply_plan(plan_of(reference), tmp_path / "reference-backup")
    final = state(reference)
    # every third point (test_apply_crash kills at each on one disk): the copies across disks sit between them
    assert every_kill_point(monkeypatch, tmp_path, fresh, plan_given_version, original, final, state, step=3) > 8

    from mqtool.apply import BackupSet, read_pending, resume_pending, restore

    copy = fileops.copy_sparse
    for at in (1, 7):
        calls = {"n": 0}

        def killed_after_copy(src, dst, copied=None, at=at):
            copy(src, dst, copied)
            calls["n"] += dst.name.endswith(fileops.TMP_SUFFIX)
            if calls["n"] == at:
                shutil.copy2(dst, tmp_path / "left")
                raise Killed(dst)

        store = fresh(f"copy{at}")
        with monkeypatch.context() as m:
            m.setattr(fileops, "copy_sparse", killed_after_copy)
            with pytest.raises(Killed) as killed:
                apply_plan(plan_of(store), tmp_path / f"copy{at}-backup")
        shutil.move(tmp_path / "left", killed.value.args[0])  # what a kill leaves: ``Killed`` unwinding ran ``install``'s clean-up
        assert read_pending(store) is not None and [p for p in (second_disk / f"copy{at}").rglob("*" + fileops.TMP_SUFFIX)]
        if at == 1:
            restore(BackupSet.open(tmp_path / f"copy{at}-backup"))
            assert state(store) == original
        else:
            resume_pending(store)
            assert state(store) == final


def owners(root: Path, disk: Path) -> dict[str, tuple[int, int, int]]:
    """uid, gid and permission bits of every file and folder of a store and of its linked folders."""
    out = {}
    for base, prefix in ((root, ""), (disk, "disk:")):
        for p in base.rglob("*"):
            if not p.is_symlink():
                st = p.lstat()
                out[prefix + str(p.relative_to(base))] = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return out


@pytest.mark.parametrize("folders", [(), ("consumequeue", "index")])
def test_files_a_repair_writes_and_restore_puts_back_keep_the_brokers_owner_and_mode(tmp_path, second_disk, folders):
    """A store owned by the broker's user (files 0640, folders 0750) repaired by root: a consume queue,
    index or checkpoint file written anew in place of one takes its owner and mode, a new one in a folder
    of such files (the index file created once the old one is deleted, in an ``index/`` left empty) its
    folder's owner, a new queue folder its parent's owner and mode. Before, every one of them was root's
    0644 (a broker running as its user could no longer write them, nor create files in the new folder),
    and ``restore`` put the original files back as root's 0644 too. Now ``restore`` gives back each
    file's owner and mode exactly."""
    store = damaged_store(tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "3")  # repair's rebuild-cq creates the folder again
    split(store, second_disk, folders)
    for p in [*store.rglob("*"), *second_disk.rglob("*")]:
        if not p.is_symlink():
            os.chown(p, *BROKER)
            p.chmod(0o750 if p.is_dir() else 0o640)
    before = owners(store, second_disk)
    done = run("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0, done.stderr
    after = owners(store, second_disk)
    new = {path: owner for path, owner in after.items() if path not in before}
    assert {path.rsplit("/", 1)[-1] for path in new} == {"3", "00000000000000000000", "20261121045514691"}, new
    for path, (uid, gid, mode) in after.items():
        new_mode = 0o750 if path.endswith("/3") else 0o644  # a new folder: its parent's mode; a new file: as created
        assert (uid, gid, mode) == (*BROKER, before[path][2] if path in before else new_mode), path
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert owners(store, second_disk) == before


def test_restore_gives_back_each_files_owner_and_mode(tmp_path):
    """The segments ``recover`` deleted and the files it rewrote, each the broker's 0640: before, ``restore``
    wrote every one anew as root's 0644, which a broker running as its user could no longer write."""
    store = damaged_store(tmp_path)
    for p in store.rglob("*"):
        os.chown(p, *BROKER)
        p.chmod(0o750 if p.is_dir() else 0o640)
    before = owners(store, tmp_path / "none")
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == 0
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert owners(store, tmp_path / "none") == before


def entries(base: Path, prefix: str = "") -> dict[str, tuple]:
    """Every entry under ``base`` as it is (links not followed): a file's bytes, a symlink's target, a
    folder, a special file's type and device; each with its owner, mode and mtime."""
    out = {}
    for p in base.rglob("*"):
        st = p.lstat()
        kind = (stat.S_IFMT(st.st_mode), st.st_rdev)  # a special file: never opened
        what = os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes() if p.is_file() else kind
        mtime = None if p.is_symlink() or p.is_dir() else st.st_mtime_ns
        out[prefix + str(p.relative_to(base))] = (what, st.st_uid, st.st_gid, st.st_mode, mtime)
    return out


@pytest.mark.parametrize("kill", [None, "copy_entry", "remove_entry"])
def test_stray_entries_in_folders_on_another_disk_are_quarantined_and_put_back(tmp_path, second_disk, monkeypatch, kill):
    """A stray folder and symlinks in ``commitlog/`` and in a queue folder, both linked to another disk than
    the backup's: before, ``repair`` refused (exit 3, "the backup directory is on another file system"), as
    no rename moves them into the backup. Now each is copied in as it is (links, owners, modes, times),
    then deleted, and ``restore`` copies it back. Killed once the move is logged (nothing moved yet) or
    once the copy is in the backup (the original not yet deleted), the same command again finishes it."""
    import mqtool.apply.backup as backup_module

    store = split(copy_store("4.9.7", "clean-small", tmp_path / "store"), second_disk, ("commitlog", "consumequeue"))
    stray = second_disk / "commitlog" / "backup"
    (stray / "sub").mkdir(parents=True)
    (stray / "sub" / "kept").write_bytes(b"kept")
    os.symlink("sub/kept", stray / "alias")
    os.chown(stray / "sub" / "kept", *BROKER)
    (stray / "sub" / "kept").chmod(0o600)
    os.utime(stray / "sub" / "kept", ns=(1, 1_500_000_000_000_000_000))
    os.symlink("/nonexistent", second_disk / "commitlog" / "zz")
    queue = next(p for p in sorted((second_disk / "consumequeue").glob("*/*")) if p.is_dir())
    (queue / "old").mkdir()
    moved = (stray, second_disk / "commitlog" / "zz", queue / "old")
    names = {p.name for p in moved}
    before = {**entries(store), **entries(second_disk, "disk:")}
    args = ("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    if kill:
        real = getattr(backup_module, kill)
        with monkeypatch.context() as m:
            m.setattr(backup_module, kill, lambda src, *rest: (_ for _ in ()).throw(Killed(src)) if src.name in names else real(src, *rest))
            with pytest.raises(Killed):
                run(*args)
        assert all(os.path.lexists(p) for p in moved)
    done = run(*args)
    assert done.exit_code == 0, done.stderr
    assert not any(os.path.lexists(p) for p in moved) and run("verify", store, "--broker-version", "4.9.7").exit_code == 0
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert {**entries(store), **entries(second_disk, "disk:")} == before


def test_a_quarantine_killed_before_its_rename_is_finished_by_the_same_command(tmp_path, monkeypatch):
    """Killed after the move of a stray folder is logged, before its rename: before, finishing the apply
    took the logged move as done and left the folder in ``commitlog/`` with its step marked done (only
    ``repair``'s planning again moved it, in a stage of its own). Now the apply it was in moves it."""
    from mqtool.apply import resume_pending

    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    (store / "commitlog" / "backup").mkdir()
    before = entries(store)
    args = ("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    real = os.rename
    with monkeypatch.context() as m:
        m.setattr(os, "rename", lambda src, dst: (_ for _ in ()).throw(Killed(src)) if Path(src).name == "backup" else real(src, dst))
        with pytest.raises(Killed):
            run(*args)
    assert resume_pending(store).complete and not (store / "commitlog" / "backup").exists()
    done = run(*args)
    assert done.exit_code == 0, done.stderr
    assert run("verify", store, "--broker-version", "4.9.7").exit_code == 0
    assert run("restore", tmp_path / "backup", "--yes").exit_code == 0 and entries(store) == before


def test_an_owner_only_root_may_give_is_left_to_the_runner(tmp_path):
    """mqtool run as a user (or as root on NFS with root_squash) cannot give a file root's owner: the
    file keeps its runner's, with the bits asked for, and the write goes on."""
    path = tmp_path / "f"
    path.write_bytes(b"")
    os.chown(path, *BROKER)
    tmp_path.chmod(0o711)
    child = os.fork()
    if child == 0:  # the broker's user, in a child process (in the folder: the ones above are root's 0700)
        try:
            os.chdir(tmp_path)
            os.setgid(BROKER[1])
            os.setuid(BROKER[0])
            fileops.set_owner(Path(path.name), (0, 0, 0o600))
        except BaseException as exc:
            os.write(2, repr(exc).encode())
            os._exit(1)
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (*BROKER, 0o600)


def test_a_quarantined_folder_is_restored_from_a_backup_moved_to_another_disk(tmp_path, second_disk):
    """The backup of a repair that quarantined a stray folder by a rename, moved to another disk since
    (space was needed): before, ``restore`` failed on renaming the folder back ("Invalid cross-device
    link", exit 3). Now it copies it back as it was."""
    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    (store / "commitlog" / "backup" / "sub").mkdir(parents=True)
    (store / "commitlog" / "backup" / "sub" / "kept").write_bytes(b"kept")
    before = entries(store)
    assert run("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup").exit_code == 0
    shutil.move(tmp_path / "backup", second_disk / "backup")
    undone = run("restore", second_disk / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert entries(store) == before


def test_a_full_disk_during_a_copy_to_another_disk_leaves_no_partial_copy(tmp_path, second_disk, monkeypatch):
    """The linked folder's disk full as a rebuilt file is copied beside its target: the apply stops with one
    line naming the file (exit 3), leaves no partial copy among the broker's files, and runs through again."""
    import errno

    store = split(damaged_store(tmp_path), second_disk, ("consumequeue", "index"))
    copy = fileops.copy_sparse

    def full(src, dst, copied=None):
        copy(src, dst, copied)
        if dst.name.endswith(fileops.TMP_SUFFIX):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    args = ("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
    with monkeypatch.context() as m:
        m.setattr(fileops, "copy_sparse", full)
        stopped = run(*args)
    assert stopped.exit_code == 3 and "No space left on device" in stopped.stderr and not list(second_disk.rglob("*" + fileops.TMP_SUFFIX))
    assert run(*args).exit_code == 0 and run("verify", store).exit_code == 0


def partials(*roots: Path) -> list[Path]:
    """What a copy cut short can leave: ``install``'s and ``work_path``'s ``*.mqtool-tmp``, ``link_or_copy``'s ``*.part``."""
    return [p for root in roots for p in root.rglob("*") if p.name.endswith((fileops.TMP_SUFFIX, ".part"))]


def failing_copy(monkeypatch, fault: BaseException, where) -> None:
    """``copy_sparse`` as it is, but a copy to a ``dst`` that ``where`` picks fails once its first block is written."""
    import mqtool.apply.backup as backup_module
    import mqtool.apply.executor as executor_module

    real = fileops.copy_sparse

    def copy(src, dst, copied=None):
        def fail(n):
            raise fault

        return real(src, dst, fail if where(Path(dst)) else copied)

    monkeypatch.setattr(fileops, "CHUNK", 1 << 16)  # a 1 MiB segment: many blocks, the copy stops part-way
    for module in (fileops, backup_module, executor_module):
        monkeypatch.setattr(module, "copy_sparse", copy)


def said_once(stderr: str, said: str) -> bool:
    """The command's last line says ``said``, and it is its only error (no traceback; progress lines before it)."""
    lines = stderr.strip().splitlines()
    return said in lines[-1] and sum(line.startswith("mqtool: error") for line in lines) <= 1 and "Traceback" not in stderr


FAULTS = {"ENOSPC": (OSError(28, "No space left on device"), 3, "No space left on device"),
          "EIO": (OSError(5, "Input/output error"), 3, "Input/output error"), "Ctrl-C": (KeyboardInterrupt(), 130, "interrupted")}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("copy", ["backup", "resize"])
def test_a_copy_of_a_repair_cut_short_leaves_no_partial_file(tmp_path, second_disk, monkeypatch, fault, copy):
    """``commitlog/`` on another disk and its last segment short: ``repair`` copies it into the backup (``.part``)
    and then beside itself (``.mqtool-tmp``, padded, renamed over it). Before, a copy cut short by a full disk, EIO
    or Ctrl-C left its partial file (beside the segment: a file the broker lists). Now it is deleted, the command
    says one line with its exit code (a full disk: naming the segment, left unchanged), and run again it finishes;
    ``restore`` puts back every byte."""
    store = split(short_segment(tmp_path), second_disk, ("commitlog",))
    before = both(store, second_disk)
    exc, code, said = FAULTS[fault]
    args = ("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    with monkeypatch.context() as m:
        failing_copy(m, exc, lambda dst: dst.name.endswith(".part" if copy == "backup" else fileops.TMP_SUFFIX))
        stopped = run(*args)
    assert stopped.exit_code == code and said_once(stopped.stderr, said), stopped.stderr
    segment = sorted((store / "commitlog").iterdir())[-1]
    if fault == "ENOSPC" and copy == "resize":  # the segment named, which is as it was: not the temporary copy beside it (removed)
        assert f"error: {segment}: No space left on device; left unchanged; " in stopped.stderr.splitlines()[-1], stopped.stderr
    if fault == "ENOSPC" and copy == "backup":  # the backup's copy named (the backup's disk is full), never made: not its ``.part``
        said_copy = re.search(rf"error: {re.escape(str(tmp_path / 'backup'))}/\S+-{segment.name}: No space left on device; not created; ", stopped.stderr)
        assert ".part" not in stopped.stderr and said_copy, stopped.stderr
    assert not partials(tmp_path, second_disk)
    assert {k: v for k, v in both(store, second_disk).items() if not k.startswith(".mqtool-")} == before  # the segment untouched (markers aside)
    done = run(*args)
    assert done.exit_code == 0, done.stderr
    assert not partials(tmp_path, second_disk) and run("verify", store, "--broker-version", "4.9.7").exit_code == 0
    assert run("restore", tmp_path / "backup", "--yes").exit_code == 0 and both(store, second_disk) == before


@pytest.mark.parametrize("fault", FAULTS)
def test_a_restore_cut_short_in_a_copy_leaves_no_partial_file(tmp_path, second_disk, monkeypatch, fault):
    """``restore`` copies the backed-up segment beside itself on the other disk: before, cut short it left the partial
    copy among the broker's files, and a full disk named that copy; now none is left, the segment is named, and ``restore``
    again puts back every byte."""
    store = split(short_segment(tmp_path), second_disk, ("commitlog",))
    before = both(store, second_disk)
    assert run("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup").exit_code == 0
    exc, code, said = FAULTS[fault]
    with monkeypatch.context() as m:
        failing_copy(m, exc, lambda dst: dst.name.endswith(fileops.TMP_SUFFIX))
        stopped = run("restore", tmp_path / "backup", "--yes")
    assert stopped.exit_code == code and said_once(stopped.stderr, said), stopped.stderr
    if fault == "ENOSPC":  # the segment named (deleted by the repair's recovery: the restore had not put it back yet), not its copy
        assert fileops.TMP_SUFFIX not in stopped.stderr and "commitlog/00000000000004194304: No space left on device; not created; " in stopped.stderr
    assert not partials(tmp_path, second_disk)
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert both(store, second_disk) == before and not partials(tmp_path, second_disk)


@contextlib.contextmanager
def file_size_limit(limit: int):
    """The kernel refuses writes past ``limit`` bytes of any file (``RLIMIT_FSIZE``: EFBIG, SIGXFSZ ignored), part-way
    through a copy as a full disk does."""
    old, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def test_a_stray_folder_copy_cut_short_leaves_no_partial_copy(tmp_path, second_disk):
    """A stray folder in ``commitlog/`` on another disk than the backup is copied in (``copy_entry``). Before, a
    copy of a file in it refused part-way left the partial folder in the backup, and the error was a list of
    every file ``shutil.copytree`` went on failing to copy; now the copy stops at that file, deletes its part,
    says one line naming it (exit 3), and the same command again finishes; ``restore`` copies the folder back."""
    store = split(copy_store("4.9.7", "clean-small", tmp_path / "store"), second_disk, ("commitlog",))
    stray = second_disk / "commitlog" / "backup"
    (stray / "sub").mkdir(parents=True)
    for name in ("a", "b"):
        (stray / "sub" / name).write_bytes(os.urandom(300_000))
    before = {**entries(store), **entries(second_disk, "disk:")}
    args = ("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    with file_size_limit(200_000):
        stopped = run(*args)
    assert stopped.exit_code == 3 and said_once(stopped.stderr, "File too large") and "[(" not in stopped.stderr, stopped.stderr
    assert not partials(tmp_path, second_disk) and (stray / "sub" / "b").exists()
    done = run(*args)
    assert done.exit_code == 0, done.stderr
    assert not stray.exists() and not partials(tmp_path, second_disk)
    assert run("restore", tmp_path / "backup", "--yes").exit_code == 0
    assert {**entries(store), **entries(second_disk, "disk:")} == before


def specials(folder: Path) -> None:
    """A FIFO, a socket and a device node (``/dev/zero``'s) in ``folder``, with a file: what a stray folder can hold."""
    import socket

    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe", 0o640)
    with socket.socket(socket.AF_UNIX) as sock, contextlib.chdir(folder):  # a socket's path: at most 107 bytes
        sock.bind("sock")
    os.mknod(folder / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    (folder / "kept").write_bytes(b"kept")
    os.chown(folder / "pipe", *BROKER)


@pytest.mark.parametrize("where", ["commitlog linked", "backup moved"])
def test_special_files_in_a_stray_folder_are_copied_as_special_files(tmp_path, second_disk, where):
    """A FIFO, a socket and a device node in a stray folder that ``repair`` copies into the backup (``commitlog/``
    on another disk) or ``restore`` copies back (the backup moved to another disk since). Before, the copy stopped
    on them (exit 3, a list of \"`pipe` is a named pipe\" and \"No such device or address\"), or, copying each
    file's bytes, waited forever for a writer to the FIFO and read /dev/zero to a full disk. Now each is made anew
    as what it is, never opened (as ``rsync --specials --devices``), and ``restore`` puts the folder back as it was."""
    from repair_support import mqtool

    store = copy_store("4.9.7", "clean-small", tmp_path / "store")
    if where == "commitlog linked":
        split(store, second_disk, ("commitlog",))
    specials(store / "commitlog" / "backup" / "sub")
    before = {**entries(store), **entries(second_disk, "disk:")}
    done = mqtool("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup", timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (store / "commitlog" / "backup").exists()
    backup = tmp_path / "backup"
    if where == "backup moved":  # by ``cp -a``, which copies special files as such (``shutil.move`` would read /dev/zero)
        subprocess.run(["cp", "-a", backup, second_disk / "backup"], check=True, timeout=60)
        shutil.rmtree(backup)
        backup = second_disk / "backup"
    undone = mqtool("restore", backup, "--yes", timeout=120)
    assert undone.returncode == 0, undone.stderr
    after = {**entries(store), **entries(second_disk, "disk:")}
    assert {k: v for k, v in after.items() if not k.startswith("disk:backup")} == before


def test_a_journal_append_refused_part_way_is_cut_off_and_names_the_backup(tmp_path):
    """``restore`` whose first write, the journal's ``restore-started``, the backup's disk refuses part-way. Before,
    the line named the store (``<store>: File too large``: the wrong disk) and the journal kept the torn line;
    now it names the journal, the journal is as it was, and ``restore`` again puts back every byte."""
    store = short_segment(tmp_path)
    before = tree(store)
    assert run("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup").exit_code == 0
    journal = tmp_path / "backup" / "01-files" / "journal.jsonl"
    kept = journal.read_bytes()
    with file_size_limit(len(kept) + 5):
        stopped = run("restore", tmp_path / "backup", "--yes")
    assert stopped.exit_code == 3 and said_once(stopped.stderr, f"{journal}: File too large"), stopped.stderr
    assert journal.read_bytes() == kept
    undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert tree(store) == before


@pytest.mark.parametrize("folders", [(), ("commitlog", "consumequeue")])
def test_a_fifo_among_a_queues_files_is_quarantined_and_put_back(tmp_path, second_disk, folders):
    """A FIFO in ``commitlog/`` and in a queue folder, which ``MappedFileQueue.load`` lists as a file of length 0 named
    by no offset. Before, ``repair`` planned nothing for it (it took only regular files for files) and stopped with
    exit 3 saying the broker refuses the store and "`mqtool repair` fixes the file first". Now each is quarantined
    (hard-linked into the backup, or made anew there from another disk) and ``restore`` puts it back as it was."""
    from repair_support import mqtool

    store = split(copy_store("4.9.7", "clean-small", tmp_path / "store"), second_disk, folders)
    queue = next(p for p in sorted((store / "consumequeue").glob("*/*")) if p.is_dir())
    fifos = (store / "commitlog" / "pipe", queue / "pipe")
    for fifo in fifos:
        os.mkfifo(fifo, 0o640)
    before = {**entries(store), **entries(second_disk, "disk:")}
    done = mqtool("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup", timeout=120)
    assert done.returncode == 0, done.stderr
    assert not any(os.path.lexists(p) for p in fifos) and mqtool("verify", store, "--broker-version", "4.9.7").returncode == 0
    undone = mqtool("restore", tmp_path / "backup", "--yes", timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert {**entries(store), **entries(second_disk, "disk:")} == before


def test_a_short_write_of_a_rebuilt_file_is_written_on(tmp_path, monkeypatch):
    """A ``pwrite`` the disk fills part-way returns a short count (POSIX), and the next one writes on once room is
    made (a log rotated meanwhile). Before, the consume queue and index writers took every ``pwrite`` as whole:
    a short one left zeros in the rebuilt file the apply installed. Now each write goes on to its end, and the
    store is the one an apply without the short write leaves."""
    from test_apply_crash import damaged_store, plan_of

    reference = damaged_store(tmp_path, "reference")
    apply_plan(plan_of(reference), tmp_path / "reference-backup")
    store = damaged_store(tmp_path)
    real, short = os.pwrite, []

    def pwrite(fd, data, offset):
        view = memoryview(data).cast("B")
        if not short and view.tobytes().strip(b"\0") and STAGING_DIR in os.readlink(f"/proc/self/fd/{fd}"):  # bytes of an entry
            short.append(offset)
            return real(fd, view[: len(view) // 2], offset)
        return real(fd, data, offset)

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", pwrite)
        apply_plan(plan_of(store), tmp_path / "backup")
    assert short and tree(store) == tree(reference)


def test_a_full_store_disk_while_the_dispatch_is_staged_is_named(tmp_path, monkeypatch):
    """The store's disk full while the rebuilt consume queue and index files are written to its staging folder
    (``write`` says ENOSPC, naming no file): before, the apply stopped with "No space left on device; the apply
    stopped at a safe point ...", naming no disk; now the line names the staging folder (or its file), on the store's disk,
    and the same command again finishes."""
    import errno

    from test_apply_crash import damaged_store

    store = damaged_store(tmp_path)
    real = os.pwrite

    def pwrite(fd, data, offset):
        if STAGING_DIR in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    args = ("recover", store, "--yes", "--backup-dir", tmp_path / "backup")
    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", pwrite)
        stopped = run(*args)
    last = stopped.stderr.strip().splitlines()[-1]  # the staging folder, or the file in it being written (a copy continued)
    assert re.search(rf"{re.escape(str(store / STAGING_DIR))}(/[^/ ]+)?: No space left on device; the apply stopped", last), last
    assert stopped.exit_code == 3 and said_once(stopped.stderr, "the apply stopped"), stopped.stderr
    assert run(*args).exit_code == 0 and run("verify", store).exit_code == 0


def test_a_range_the_full_backup_disk_refuses_is_named_as_its_copy(tmp_path, monkeypatch):
    """The backup's disk full while a kept range is copied (``BackupSet._keep_range``): the line names the range's copy in the
    backup, not created, not its ``.mqtool-tmp``; the store is as it was."""
    import errno

    store = copy_store("4.9.7", "crashed-small", tmp_path / "store")
    with open(store / "commitlog" / "00000000000003145728", "r+b") as f:  # bytes after the valid end: a range to keep
        f.seek(600000)
        f.write(b"\1" * 20000)
    before = tree(store)
    real = os.pwrite

    def pwrite(fd, data, offset):
        if "/ranges/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", pwrite)
        stopped = run("recover", store, "--yes", "--backup-dir", tmp_path / "backup", "--broker-version", "4.9.7")
    last = stopped.stderr.strip().splitlines()[-1]
    assert stopped.exit_code == 3 and fileops.TMP_SUFFIX not in last, stopped.stderr
    assert re.search(rf"error: {re.escape(str(tmp_path / 'backup' / 'ranges'))}/\S+@\d+-\d+: No space left on device; not created", last), last
    assert {k: v for k, v in tree(store).items() if not k.startswith(".mqtool-")} == before


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_full_disk_while_staging_says_the_store_was_not_changed(tmp_path, monkeypatch, command):
    """Before: a full store disk while the rebuilt files were staged, before the apply's first action, said "the apply
    stopped at a safe point: ... or undo it with: mqtool restore ...", though no file of the store had changed, leaving
    a backup and the pending mark. Now it says the store was not changed and to run the command again, leaves the store
    as it was (no mark, no staging folder, no backup), and that run applies it."""
    import errno

    store = damaged_store(tmp_path)
    before = tree(store)
    real = os.pwrite

    def pwrite(fd, data, offset):
        if STAGING_DIR in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    args = (command, store, "--yes", "--backup-dir", tmp_path / "backup")
    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", pwrite)
        stopped = run(*args)
    said = (": No space left on device; the apply stopped before it changed the store: fix this (a full disk: "
            f"free space) and run `mqtool {command} {store} --yes` to apply it")
    last = stopped.stderr.strip().splitlines()[-1]  # the staging folder, or the file in it being written (a copy continued)
    assert re.search(rf"{re.escape(str(store / STAGING_DIR))}(/[^/ ]+)?{re.escape(said)}", last), last
    assert stopped.exit_code == 3 and said_once(stopped.stderr, said) and "restore" not in stopped.stderr, stopped.stderr
    assert tree(store) == before and not [p for p in os.listdir(store) if p.startswith(".mqtool")]
    assert not (tmp_path / "backup").exists() or not any((tmp_path / "backup").iterdir())
    assert run(*args).exit_code in (0, 1) and run("verify", store).exit_code == 0


def test_a_stray_folder_whose_copy_cannot_make_a_folder_says_one_line(tmp_path, second_disk, monkeypatch):
    """The backup's disk refuses a folder inside a stray folder being copied in (``mkdir``: ENOSPC). Before, the
    copy (``shutil.copytree``) went on and said a list of (source, copy, error) tuples; now it stops there with one
    line naming the folder (exit 3), leaves no part, and the same command again finishes."""
    import errno

    store = split(copy_store("4.9.7", "clean-small", tmp_path / "store"), second_disk, ("commitlog",))
    (second_disk / "commitlog" / "backup" / "sub" / "deeper").mkdir(parents=True)
    (second_disk / "commitlog" / "backup" / "sub" / "kept").write_bytes(b"kept")
    before = {**entries(store), **entries(second_disk, "disk:")}
    real = os.mkdir

    def mkdir(path, *rest, **options):
        if Path(path).name == "deeper" and fileops.TMP_SUFFIX in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *rest, **options)

    args = ("repair", store, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    with monkeypatch.context() as m:
        m.setattr(os, "mkdir", mkdir)
        stopped = run(*args)
    assert stopped.exit_code == 3 and said_once(stopped.stderr, "deeper: No space left on device"), stopped.stderr
    assert "[(" not in stopped.stderr
    assert not partials(tmp_path, second_disk)
    assert run(*args).exit_code == 0 and run("restore", tmp_path / "backup", "--yes").exit_code == 0
    assert {**entries(store), **entries(second_disk, "disk:")} == before


@pytest.mark.parametrize("name, said", [("lock", "nothing to repair"), ("config/topics.json.bak", "this is the plan")])
def test_a_fifo_among_the_stores_own_files_is_never_opened(tmp_path, name, said):
    """``lock``, or the ``.bak`` of an unreadable ``topics.json``, a FIFO: before, ``info`` and ``repair`` waited forever
    opening it for reading (the live-broker check's ``lock``, the version marks' ``dataVersion``); now they never
    wait on it. The ``lock`` is as if missing; the ``.bak`` is what the broker's ``loadBak`` hangs on (``store.A_FIFO``),
    which repair plans to move out."""
    from repair_support import mqtool

    store = copy_store("4.9.7", "config-real", tmp_path / "store")
    (store / name).unlink()
    os.mkfifo(store / name)
    if name.startswith("config"):
        (store / "config" / "topics.json").write_bytes(b"garbage{")  # the broker (and mqtool) then read its .bak
    assert mqtool("info", store, timeout=60).returncode == 0
    planned = mqtool("repair", store, "--broker-version", "4.9.7", timeout=60)
    assert planned.returncode == 0 and said in planned.stderr, planned.stderr


@pytest.mark.parametrize("name", ["config/timercheck", "timerwheel"])
def test_a_fifo_as_a_store_file_the_broker_maps_is_its_refusal_and_repair_moves_it_out(tmp_path, name):
    """The timer checkpoint, or the timer wheel, a FIFO: before, ``info`` (the checkpoint) and ``repair`` (the wheel's
    slots) waited forever mapping it. The broker opens it (``RandomAccessFile "rw"`` opens a FIFO) and its
    ``FileChannel.map`` throws, so ``BrokerController.initialize`` fails, as on a directory there: every command says that
    refusal without opening it, ``repair --yes`` moves it into the backup, and ``restore`` puts the FIFO back."""
    from repair_support import mqtool

    store = copy_store("5.3.3", "timer-small", tmp_path / "store")
    (store / name).unlink()
    os.mkfifo(store / name)
    said = f"{name}: a FIFO, socket or device node, which Timer"
    shown = mqtool("info", store, "--broker-version", "5.3.3", "--format", "json", timeout=60)
    assert shown.returncode == 0 and said in json.loads(shown.stdout)["next_start"]["line"], shown.stdout + shown.stderr
    assert "cannot map (FileChannel.map throws)" in json.loads(shown.stdout)["next_start"]["line"]  # it opens; the map throws
    found = mqtool("verify", store, "--broker-version", "5.3.3", "--format", "jsonl", timeout=60)
    assert any('"not-a-file"' in line and said in line for line in found.stdout.splitlines()), found.stdout
    done = mqtool("repair", store, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "backup", timeout=120)
    assert done.returncode in (0, 1) and not os.path.lexists(store / name), done.stderr
    assert mqtool("restore", tmp_path / "backup", "--yes", timeout=60).returncode == 0
    assert stat.S_ISFIFO(os.lstat(store / name).st_mode)


class FullBackupDisk:
    """The backup's disk with no byte free from the apply's first action on (the store's own writes, on the same disk, took
    the rest): a file written under ``folder`` then fits only in what the backup's ``reserve`` gave back since (``os.truncate``
    of it), counted at each ``fsync``; the store's writes are not counted."""

    def __init__(self, monkeypatch, folder: Path):
        from mqtool.apply import executor

        self.folder, self.full, self.room, self.sizes = str(folder), False, 0, {}
        real_fsync, real_truncate, back_up = os.fsync, os.truncate, executor.Executor._back_up

        def fsync(fd):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if self.full and path.startswith(self.folder) and os.path.isfile(path) and not path.endswith("/reserve"):
                grown = os.fstat(fd).st_size - self.sizes.get(path, 0)
                if grown > self.room:
                    raise OSError(errno.ENOSPC, "No space left on device")
                self.room -= max(grown, 0)
                self.sizes[path] = os.fstat(fd).st_size
            return real_fsync(fd)

        def truncate(path, length):
            if self.full and str(path).endswith("/reserve"):
                self.room += os.stat(path).st_size - length
            return real_truncate(path, length)

        def first_action(executor_self, action):
            self.full = True
            return back_up(executor_self, action)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "truncate", truncate)
        monkeypatch.setattr(executor.Executor, "_back_up", first_action)


def test_a_repair_whose_backup_disk_fills_once_the_store_changes_finishes_and_restores(tmp_path, monkeypatch):
    """The backup on the store's nearly full disk (a 4 MiB tmpfs in the audit): the room check passed, then the store's own
    writes took the rest. Before, the bytes the backup writes once the store changes were in no one's room: the cut's kept
    range, the journal's events, and the manifest written again with "after" (the audit's tmpfs: ENOSPC at
    ``manifest.json.mqtool-tmp`` once the last step was done, and `repair --yes` again failing the same way; this test's disk:
    exit 3 at the kept range's copy). Now that room is taken before the first change (the backup's ``reserve``): the repair
    finishes (exit 0), its backup is complete, and ``restore`` on that disk puts back every byte."""
    store = damaged_store(tmp_path)
    before = tree(store)
    with monkeypatch.context() as m:
        disk = FullBackupDisk(m, tmp_path / "backup")
        done = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
        assert done.exit_code == 0, done.stderr
        assert disk.full and disk.room >= 0
        stage = tmp_path / "backup" / "01-recover"
        journal = (stage / "journal.jsonl").read_text().splitlines()
        assert json.loads(journal[-1]) == {"ev": "complete"} and json.loads((stage / "manifest.json").read_text())["complete"]
        assert run("verify", store).exit_code == 0
        undone = run("restore", tmp_path / "backup", "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert tree(store) == before and not (tmp_path / "backup" / "01-recover" / "reserve").exists()


def in_use(*roots: Path) -> int:
    """The bytes of the regular files under ``roots``, each file (inode) once."""
    seen = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                st = os.lstat(os.path.join(folder, name))
                if stat.S_ISREG(st.st_mode):
                    seen[st.st_dev, st.st_ino] = st.st_size
    return sum(seen.values())


@pytest.mark.parametrize("where", ["beside the store", "on another disk"])
def test_a_restore_on_a_full_disk_puts_the_store_back_in_the_room_it_frees(tmp_path, second_disk, monkeypatch, where):
    """The store's disk exactly full as ``restore`` starts, with room for the store as it was (and the restore's pending mark).
    Before, restore put
    each original back as a fresh copy in reverse order and deleted the files the repair created last: with the backup beside
    the store (hard links), the copies of the segments the recovery deleted needed their room a second time; on another disk,
    the new index file was still there as the last originals came back (both: ENOSPC, exit 3; it worked only once space was
    freed). Now the created files and the current versions of those it replaced are deleted first (their originals whole in
    the backup), and an original the backup kept as a hard link is linked back: exit 0, every byte back."""
    import mqtool.apply.backup as backup_module

    store = damaged_store(tmp_path)
    backup = (tmp_path if where == "beside the store" else second_disk) / "backup"
    before, size = tree(store), in_use(store)
    assert run("repair", store, "--yes", "--backup-dir", backup).exit_code == 0
    disk = (store, backup) if os.stat(backup).st_dev == os.stat(store).st_dev else (store,)
    capacity = max(in_use(*disk), size) + 4096  # full, the store as it was fitting, and a block for restore's mark
    real = fileops.copy_sparse

    def copy(src, dst, copied=None):
        if str(dst).startswith(str(store)) and in_use(*disk) + os.stat(src).st_size > capacity:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, copied)

    with monkeypatch.context() as m:
        m.setattr(backup_module, "copy_sparse", copy)
        undone = run("restore", backup, "--yes")
    assert undone.exit_code == 0, undone.stderr
    assert tree(store) == before


def test_a_repair_whose_later_stage_would_not_fit_is_refused_before_its_first_stage(tmp_path, monkeypatch):
    """A stray file in a queue folder (stage 01-files quarantines it) and a cut commit log (stage 02-recover keeps the 767 KiB
    it zeroes and its manifest): a backup disk with room for the first stage's backup and not for both (512 KiB, as
    ``shutil.disk_usage`` says: patched). Before, stage 01 was applied, stage 02's room check refused it and stage 01 was
    undone (exit 4, "the 1 stage(s) applied before: the changes were undone"). Now the recovery's backup, known from the
    plan, is counted before the first stage: refused with nothing changed, no backup made."""
    import shutil
    from collections import namedtuple

    from mqtool.errors import EXIT_REFUSED

    store = damaged_store(tmp_path)
    (store / "consumequeue" / "TopicTest" / "0" / "notes.txt").write_text("a stray file")
    before = tree(store)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 512 << 10))
    done = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == EXIT_REFUSED, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"mqtool: error: {tmp_path / 'backup' / '01-files'}: the backup needs "), line
    assert "(this stage and the 1 planned after it)" in line, line
    assert line.endswith("free; nothing changed: free space there or give a --backup-dir with room"), line
    assert tree(store) == before and not [p for p in os.listdir(store) if p.startswith(".mqtool")]
    assert not (tmp_path / "backup").exists() or not any((tmp_path / "backup").iterdir())
