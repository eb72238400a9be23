"""What the write path says when it fails or is stopped (an audit of the messages, in a 100-column terminal): a refused write
named as the file the user cares about, pasteable paths, a SIGBUS said with its file, a Ctrl-C under a progress bar."""

from __future__ import annotations

import errno
import io
import os
import shlex
import subprocess
import sys

from conftest import ROOT, copy_store, terminal_run
from typer.testing import CliRunner

import mqtool.fileops as fileops
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT
from mqtool.fileops import shell_path
from repair_support import tree

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def full_disk_for(monkeypatch, full) -> None:
    """``write_atomic``'s temporary files whose name ``full(name)`` accepts are on a full disk (``write`` says ENOSPC, naming none)."""

    class FullDisk(io.FileIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_open(path, mode="r", *args, **kwargs):
        if mode == "wb" and full(str(path)):
            return io.BufferedWriter(FullDisk(path, mode))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(fileops, "open", full_disk_open, raising=False)


def test_a_plan_out_refused_by_a_full_disk_is_named_quoted_and_left_unchanged(tmp_path, monkeypatch):
    """``recover STORE --plan-out 'plans dir/p.json'`` over an earlier plan, on a full disk. Before: ``mqtool: error: /tmp/.../plans
    dir/p.json: No space left on device`` (repair's own special case; any other write_atomic said ``p.json.mqtool-tmp``), the path
    unquoted and nothing on the earlier plan. Now the path pastes and the line says the file was left as it was."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    plan = tmp_path / "plans dir" / "p.json"
    plan.parent.mkdir()
    plan.write_text('{"earlier": true}')
    full_disk_for(monkeypatch, lambda name: name.endswith(fileops.TMP_SUFFIX))
    res = run("recover", store, "--plan-out", plan)
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines()[-1] == f"mqtool: error: {shell_path(plan)}: No space left on device; left unchanged"
    assert plan.read_text() == '{"earlier": true}' and [p.name for p in plan.parent.iterdir()] == ["p.json"]
    plan.unlink()
    res = run("recover", store, "--plan-out", plan)
    assert res.stderr.splitlines()[-1] == f"mqtool: error: {shell_path(plan)}: No space left on device; not created"
    assert list(plan.parent.iterdir()) == []


def test_an_applys_refused_checkpoint_write_names_the_checkpoint_not_its_temporary_file(tmp_path, monkeypatch):
    """``recover STORE --yes``, its checkpoint's write refused (a full disk). Before: ``mqtool: error: /tmp/on
    call/.../.mqtool-staging/checkpoint.mqtool-tmp: No space left on device; the apply stopped at a safe point ...``: a file in
    mqtool's staging folder, unquoted, gone by the time it is read. Now the store's checkpoint, quoted, said left unchanged
    (it is: the bytes the store held), then how to finish or undo the apply."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    original, before = tree(store), (store / "checkpoint").read_bytes()
    full_disk_for(monkeypatch, lambda name: name.endswith("checkpoint" + fileops.TMP_SUFFIX))
    res = run("recover", store, "--yes", "--backup-dir", tmp_path / "bk")
    assert res.exit_code == 3, res.output
    line = res.stderr.splitlines()[-1]
    assert line.startswith(f"mqtool: error: {shell_path(store / 'checkpoint')}: No space left on device; left unchanged; "
                           "the apply stopped at a safe point"), line
    assert fileops.TMP_SUFFIX not in line and (store / "checkpoint").read_bytes() == before
    assert shlex.split(line.rsplit("undo it with: ", 1)[1]) == ["mqtool", "restore", str(tmp_path / "bk"), "--yes"]
    monkeypatch.undo()
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0 and tree(store) == original


def test_salvage_stopped_names_its_partial_store_quoted_to_paste(tmp_path, monkeypatch):
    """``salvage --to-store 'a b/new store'`` stopped by a full disk leaves ``new store.mqtool-partial`` and says to delete it.
    Before: ``mqtool: /tmp/.../a b/new store.mqtool-partial: the new store is incomplete (not at /tmp/.../a b/new store, ...)``,
    unquoted: pasted after ``rm -r`` it names three paths. Now both paths are quoted as a shell reads them."""
    source = copy_store("4.9.7", "crashed-small", tmp_path / "src")
    target = tmp_path / "a b" / "new store"
    target.parent.mkdir()
    real = os.pwrite

    def pwrite(fd, data, offset):  # the new store's disk is full
        if ".mqtool-partial" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    res = run("salvage", source, "--to-store", target, "-f", "jsonl", "--out", tmp_path / "rows.jsonl")
    assert res.exit_code == 3, res.output
    partial = target.with_name(target.name + ".mqtool-partial")
    note = next(line for line in res.stderr.splitlines() if "the new store is incomplete" in line)
    assert note.startswith(f"mqtool: {shell_path(partial)}: the new store is incomplete (not at {shell_path(target)}, "), note
    assert shlex.split(note.removeprefix("mqtool: ").split(": the new store")[0]) == [str(partial)] and partial.is_dir()


def shown(raw: str, columns: int) -> list[str]:
    """The lines a terminal of ``columns`` shows for ``raw``: characters, CR, LF, erase to the end of the line and cursor up (what
    tqdm and mqtool write); each line's trailing blanks dropped."""
    import re

    lines, row, col, i = [""], 0, 0, 0
    while i < len(raw):
        ch, i = raw[i], i + 1
        if ch == "\x1b":
            m = re.match(r"\[([0-9;?]*)([A-Za-z])", raw[i:])
            if m:
                i += m.end()
                if m[2] == "K":
                    lines[row] = lines[row][:col]
                elif m[2] == "A":
                    row -= min(row, int(m[1] or 1))
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n" or (ch >= " " and col >= columns):  # a line feed, or a character past the edge wrapped to the next line
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        if ch >= " ":
            line = lines[row].ljust(col)
            lines[row], col = line[:col] + ch + line[col + 1:], col + 1
    return [line.rstrip() for line in lines]


def ctrl_c_under_a_bar(args, columns: int = 100, env=None) -> tuple[int, list[str]]:
    """``mqtool ARGS`` on a pseudo-terminal it has as its controlling terminal (as a shell's foreground job), its progress bar
    held where drawn until Ctrl-C is typed into the terminal, which echoes ``^C`` and sends SIGINT: the exit code and screen."""
    held = ("import sys, time; import mqtool.cli.progress as p; advance = p.ByteProgress.advance; "
            "p.ByteProgress.advance = lambda self, offset: time.sleep(60) if self.bar is not None else advance(self, offset); "
            "from mqtool.cli import main; sys.argv = ['mqtool', *sys.argv[1:]]; main()")
    code, raw = terminal_run(args, columns, env, timeout=60, program=held, type_when=(b"%|", b"\x03"))  # typed once the bar is drawn
    return code, [line for line in shown(raw, columns) if line]


def test_ctrl_c_under_a_progress_bar_ends_with_the_bar_gone_and_one_clean_line(tmp_path):
    """Ctrl-C while ``verify`` or ``salvage --out FILE`` shows its progress bar, at 100 columns. Before: the terminal's echoed
    ``^C``, two columns past the bar, stayed at the end of the next line, ``mqtool: error: interrupted  ...  ^C`` (salvage: at
    the end of its note on the rows' file): tqdm blanks only the bar's own width. Now the line is blanked whole first, with
    blanks where no escape sequence is written (``NO_COLOR``)."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    for env in (None, {"NO_COLOR": "1"}):
        code, lines = ctrl_c_under_a_bar(["verify", store, "--progress"], env=env)
        assert (code, lines[-1:]) == (130, ["mqtool: error: interrupted"]), (env, lines)
        assert not [line for line in lines if "^C" in line or "%|" in line], (env, lines)
    rows = tmp_path / "rows.jsonl"
    code, lines = ctrl_c_under_a_bar(["salvage", store, "-f", "jsonl", "--out", rows, "--progress"])
    assert (code, lines[-1]) == (130, "mqtool: error: interrupted"), lines
    kept = f"mqtool: {shell_path(rows)}: holds only the rows written before salvage stopped"  # where the file was begun
    assert " ".join(lines[:-1]) == (kept if rows.exists() else ""), lines  # wrapped at 100


def test_ctrl_c_with_no_bar_ends_with_one_clean_line(tmp_path):
    """Ctrl-C while ``verify -q`` runs (no bar drawn): before, the terminal's echoed ``^C`` began the interrupted line
    (``^Cmqtool: error: interrupted``, seen on a restore); now the line is blanked first."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    held = ("import os, sys, time; import mqtool.cli.progress as p; "
            "p.ByteProgress.advance = lambda self, offset: (os.write(1, b'HELD\\r\\n'), time.sleep(60)); "
            "from mqtool.cli import main; sys.argv = ['mqtool', *sys.argv[1:]]; main()")
    code, raw = terminal_run(["verify", store, "-q"], timeout=60, program=held, type_when=(b"HELD", b"\x03"))
    assert (code, [line for line in shown(raw, 100) if line]) == (130, ["HELD", "mqtool: error: interrupted"]), raw


SHRINKS_WHILE_MAPPED = """import os, sys
from pathlib import Path
import mqtool.apply.executor as executor
import mqtool.cli.repair as repair
import mqtool.store.mappedfile as mappedfile
when, state = sys.argv.pop(1), {"applying": False, "done": False}
init, stage = mappedfile.MappedFile.__init__, executor.Executor._stage_dispatch

def shrinking(self, path, *args, **kwargs):  # the first segment cut to nothing once mapped: its next read is a SIGBUS
    init(self, path, *args, **kwargs)
    path = Path(path)
    if (path.parent.name, path.name) == ("commitlog", "00000000000000000000") and not state["done"] and (when == "planning" or state["applying"]):
        state["done"] = True
        os.truncate(path, 0)

def staging(self):
    state["applying"] = True
    return stage(self)

def stages(self, *args, **kwargs):  # "stages": from repair's first stage's planning on
    state["applying"] = state["applying"] or when == "stages"
    made(self, *args, **kwargs)

made = repair.RepairStages.__init__
mappedfile.MappedFile.__init__, executor.Executor._stage_dispatch, repair.RepairStages.__init__ = shrinking, staging, stages
from mqtool.cli import main
sys.argv[0] = "mqtool"
main()
"""


def sigbus_in(when: str, *args):
    return subprocess.run([sys.executable, "-c", SHRINKS_WHILE_MAPPED, when, *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_a_sigbus_names_the_mapped_file_quoted_as_a_shell_reads_it(tmp_path):
    """The compiled SIGBUS handler said "a store file could not be read through its memory map", never which. It now names
    the file mapped at the faulting address (``/proc/self/maps``), quoted as ``shlex.quote`` quotes it; a SIGBUS sent by
    ``kill`` (no address) keeps the generic words."""
    segment = tmp_path / "on call" / "it's 00000000000000000000"
    segment.parent.mkdir()
    segment.write_bytes(b"\1" * 65536)
    code = ("import os, sys; from pathlib import Path; from mqtool.store.mappedfile import MappedFile, exit_on_sigbus; exit_on_sigbus(); "
            "m = MappedFile(Path(sys.argv[1])); os.truncate(sys.argv[1], 0); print(bytes(m.buf[4096:4097]))")
    done = subprocess.run([sys.executable, "-c", code, str(segment)], capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stdout) == (EXIT_BAD_INPUT, ""), done.stderr
    assert done.stderr == (f"mqtool: error: {shell_path(segment)} could not be read through its memory map (SIGBUS: the file shrank while mapped, "
                           "or its filesystem is full, e.g. a full tmpfs); check the disk and run the command again\n")
    assert shlex.split(done.stderr.split(" could not be read")[0].removeprefix("mqtool: error: ")) == [str(segment)]


def test_a_sigbus_while_planning_says_the_file_and_that_nothing_was_changed(tmp_path):
    """``recover STORE --yes`` whose first segment shrinks under its map while the store is read and planned (as a full tmpfs
    answers a sparse segment's read). Before: "a store file could not be read ...; check the disk and run the command again",
    not which file nor whether the store was touched. Now the segment, quoted, and "nothing was changed": no backup, no marker."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    segment = store / "commitlog" / "00000000000000000000"
    before = tree(store, but=(segment.name,))
    done = sigbus_in("planning", "recover", store, "--yes", "--backup-dir", tmp_path / "bk", "-f", "json")
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"mqtool: error: {shell_path(segment)} could not be read through its memory map (SIGBUS"), done.stderr
    assert done.stderr.endswith("; nothing was changed: check the disk and run the command again\n"), done.stderr
    assert tree(store, but=(segment.name,)) == before and sorted(p.name for p in tmp_path.iterdir()) == ["on call"]


def test_a_sigbus_on_a_terminal_blanks_the_bars_line_first(tmp_path):
    """``verify --progress`` on a terminal whose first segment shrinks under its map. Before: the handler's line was written
    where the cursor stood, at the end of a progress bar (``recovery scan: 0%|...| 0.00/268M [...]mqtool: error: ...``). Now
    it blanks the line first, as a Ctrl-C's line does; not where no escape is written (a pipe: the tests above)."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    code, raw = terminal_run(["planning", "verify", store, "--progress"], program=SHRINKS_WHILE_MAPPED)
    assert code == 3 and raw.endswith("\r\x1b[Kmqtool: error: " + shell_path(store / "commitlog" / "00000000000000000000") +
                                      " could not be read through its memory map (SIGBUS: the file shrank while mapped, or its filesystem is "
                                      "full, e.g. a full tmpfs); check the disk and run the command again\n"), raw[-500:]
    assert not [line for line in shown(raw, 100) if "%|" in line], raw[-500:]


def test_a_sigbus_while_repair_plans_its_first_stage_says_nothing_was_changed(tmp_path):
    """``repair STORE --yes`` whose first segment shrinks under its map while its first stage is planned (the plan shown, no
    stage applied). Before: "the store may be partly changed ... undo it with: mqtool restore BACKUP --yes", a backup that did
    not exist. Now "nothing was changed", and the store holds no backup and no marker."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    segment = store / "commitlog" / "00000000000000000000"
    before = tree(store, but=(segment.name,))
    done = sigbus_in("stages", "repair", store, "--yes", "--backup-dir", tmp_path / "bk")
    line = done.stderr.splitlines()[-1]
    assert done.returncode == 3 and line.startswith(f"mqtool: error: {shell_path(segment)} could not be read through its memory map"), done.stderr
    assert line.endswith("; nothing was changed: check the disk and run the command again"), line
    assert tree(store, but=(segment.name,)) == before and not (tmp_path / "bk").exists()


def test_a_sigbus_while_applying_says_the_file_and_the_restore_that_undoes_it(tmp_path):
    """``recover STORE --yes`` whose first segment shrinks under its map once the apply has begun (its marker written, the
    dispatch being staged): not unchanged, so the line names the file and the restore command, which, pasted once the file
    is back, leaves the store as it was."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    segment = store / "commitlog" / "00000000000000000000"
    original, kept = tree(store), segment.read_bytes()
    done = sigbus_in("applying", "recover", store, "--yes", "--backup-dir", tmp_path / "my backup", "-f", "json")
    assert done.returncode == 3, done.stderr
    line = done.stderr.splitlines()[-1]
    assert line.startswith(f"mqtool: error: {shell_path(segment)} could not be read through its memory map (SIGBUS"), line
    assert "; the store may be partly changed: " in line and (store / ".mqtool-pending").exists()
    undo = shlex.split(line.rsplit("undo it with: ", 1)[1])
    assert undo == ["mqtool", "restore", str(tmp_path / "my backup"), "--yes"]
    segment.write_bytes(kept)  # the disk fixed
    restored = subprocess.run([sys.executable, "-m", *undo], capture_output=True, text=True, cwd=ROOT)
    assert restored.returncode == 0 and tree(store) == original, restored.stderr
