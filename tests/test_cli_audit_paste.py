"""Commands mqtool prints for the reader to paste, as a terminal of 100 columns (or fewer) shows them: a line break mqtool
puts inside one (wrapping its text at spaces) pastes as two commands, the first run on its own. Each test failed before
its fix."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import pytest

from typer.testing import CliRunner

from conftest import copy_store, store_path, terminal_run
from mqtool.cli import app
from mqtool.fileops import shell_path

runner = CliRunner()


@pytest.fixture
def short_tmp():
    """A folder with a space under /tmp: a short path, so that the commands naming it fit the widths tried (``tmp_path``,
    in /dev/shm/pytest-of-USER/..., makes each wider than 100 columns)."""
    with tempfile.TemporaryDirectory(prefix="on call ", dir="/tmp") as d:
        yield Path(d)


def in_terminal(args, columns: int) -> tuple[int, str]:
    """mqtool on a pseudo-terminal without colour: its exit code and output."""
    return terminal_run(args, columns, {"NO_COLOR": "1"})


def test_the_undo_line_on_a_terminal_keeps_its_restore_command_on_one_line(short_tmp):
    """``recover STORE --yes --backup-dir DIR`` on a 100-column terminal, DIR with spaces and long enough that the undo
    line does not fit (the command does, at 96 columns). Before: ``mqtool: undo with: mqtool restore`` then, on the next line, ``'DIR' --yes``: pasted,
    the first line runs ``mqtool restore`` alone (a usage error) and the second tries to run the folder. Now the line
    breaks before the command, which stays whole; the same for the plan-file line of ``--plan-out``."""
    store = copy_store("4.9.7", "crashed-small", short_tmp)
    night = short_tmp / "backups of the night"
    backup = night / ("broker-a" + "x" * (96 - len(f"mqtool restore {shell_path(night / 'broker-a')} --yes")))
    code, shown = in_terminal(["recover", store, "--yes", "--backup-dir", backup], 100)
    assert code == 0, shown
    undo = f"mqtool restore {shell_path(backup)} --yes"
    assert len(undo) == 96 and "Traceback" not in shown
    assert any(undo in line for line in shown.splitlines()), shown[-600:]
    code, shown = in_terminal(["restore", backup, "--yes"], 100)
    assert code == 0, shown
    wider = night / ("broker-a" + "x" * 100)  # a path wider than the terminal: its line runs past the edge either way,
    code, shown = in_terminal(["recover", store, "--yes", "--backup-dir", wider], 100)  # and the terminal's wrap pastes whole
    undo = f"mqtool restore {shell_path(wider)} --yes"
    assert code == 0 and any(undo in line for line in shown.splitlines()), shown[-600:]
    code, shown = in_terminal(["restore", wider, "--yes"], 100)
    assert code == 0, shown
    plan = short_tmp / "plans of the night" / "p.json"
    plan = plan.with_name("p" * (97 - len(f"mqtool apply {shell_path(plan)} --yes")) + ".json")
    plan.parent.mkdir()
    code, shown = in_terminal(["recover", store, "--plan-out", plan], 100)
    apply = f"mqtool apply {shell_path(plan)} --yes"
    assert code == 0 and any(apply in line for line in shown.splitlines()), shown[-600:]


def test_verifys_next_commands_are_never_broken_at_any_width(short_tmp):
    """``verify STORE`` of a crashed store, its path with a space, at every width from 64 to 100 columns: the summary's
    `` `mqtool recover 'STORE'` `` and `` `mqtool repair 'STORE'` `` each on one line. Before: at 70 columns the line broke
    inside the quoted path (``'/tmp/on`` then ``call .../4.9.7-crashed-small'``), at others between ``mqtool repair`` and it."""
    store = copy_store("4.9.7", "crashed-small", short_tmp)
    broken = []
    for width in range(64, 101):  # each command is 60 columns, the summary's lines indented by 2
        res = runner.invoke(app, ["verify", str(store)], env={"COLUMNS": str(width)})
        assert res.exit_code == 1, res.output
        lines = res.stdout.splitlines()
        for command in (f"`mqtool recover {shell_path(store)}`", f"`mqtool repair {shell_path(store)}`"):
            if not any(command in line for line in lines):
                broken.append((width, command))
    assert not broken, broken


def test_a_plan_out_on_a_full_disk_is_named_as_given(tmp_path, monkeypatch):
    """``recover STORE --plan-out FILE`` with FILE on a full disk. Before: ``mqtool: error: FILE.mqtool-tmp: No space left
    on device``, a file the operator never named (and that is not there: it is removed). Now the error names FILE, not
    created; exit 3, nothing left beside it."""
    import errno
    import io

    import mqtool.fileops as fileops

    class FullDisk(io.FileIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_open(path, mode="r", *args, **kwargs):
        return io.BufferedWriter(FullDisk(path, mode)) if mode == "wb" else open(path, mode, *args, **kwargs)

    monkeypatch.setattr(fileops, "open", full_disk_open, raising=False)
    plan = tmp_path / "plans" / "p.json"
    plan.parent.mkdir()
    res = runner.invoke(app, ["recover", str(store_path("4.9.7", "crashed-small")), "--plan-out", str(plan)], env={"COLUMNS": "100"})
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines()[-1] == f"mqtool: error: {plan}: No space left on device; not created"
    assert list(plan.parent.iterdir()) == []


def test_a_recovery_that_creates_index_files_with_no_geometry_to_go_by_says_it_uses_the_defaults(tmp_path):
    """A 4.9.7 crashed store whose ``index/`` was removed (the usual first aid for a bad index), planned without
    ``--broker-config``. Before: ``recover``'s and ``repair``'s plans created a 420000040-byte index file under the
    broker's default geometry with only the table heading (``Index (5000000 slots x 20000000 entries)``) to show it,
    where the store's 1000-slot broker.conf would have the broker read that file otherwise (``rebuild-index`` noted it).
    Now a note says so and names ``--broker-config``; with it, the note is gone and the plan follows broker.conf."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    for p in (store / "index").iterdir():
        p.unlink()
    (store / "index").rmdir()
    for command in ("recover", "repair"):
        doc = runner.invoke(app, [command, str(store), "--dry-run" if command == "recover" else "-q", "-f", "json"])
        notes = [n for n in json.dumps(doc.stdout and json.loads(doc.stdout)).split('"') if "default geometry" in n]
        assert len(notes) == 1, (command, doc.output[-800:])
        assert "5000000 slots x 20000000 entries, 420000040 bytes a file" in notes[0] and "--broker-config" in notes[0]
    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=1000\nmaxIndexNum=4000\n")
    doc = json.loads(runner.invoke(app, ["recover", str(store), "--dry-run", "-f", "json", "--broker-config", str(conf)]).stdout)
    assert "default geometry" not in json.dumps(doc) and doc["index"]["hash_slot_num"] == 1000


def test_info_shows_an_interrupted_applys_backup_quoted_and_whole_at_100_columns(short_tmp):
    """``info`` of a store whose ``recover --yes`` was killed mid-apply, its backup folder's path holding a space. Before:
    the table row ``interrupted apply  backup /tmp/on call .../bk (see the note on stderr)`` was the one path mqtool
    printed unquoted, and at 100 columns it broke at the space inside it. Now it is quoted as every other path, and whole."""
    from repair_support import mqtool

    store = copy_store("4.9.7", "crashed-small", short_tmp)
    backup = short_tmp / "backups of the night" / ("b" * 40)
    killed = mqtool("recover", store, "--yes", "--backup-dir", backup, env={"MQTOOL_TEST_KILL_AT": "2"})
    assert killed.returncode == -9, killed.stderr
    res = runner.invoke(app, ["info", str(store)], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    first = next(k for k, line in enumerate(lines) if line.startswith("interrupted apply"))
    row = [lines[first]] + list(itertools.takewhile(lambda line: line.startswith(" "), lines[first + 1 :]))
    assert any(shell_path(backup) in line for line in row), row


def test_a_command_in_backticks_after_a_bracket_is_kept_whole_too():
    """The plan note on a damaged record names its commands in brackets: ``(`mqtool verify 'STORE' --keep-going` shows
    ...``. Before, the opening bracket hid the backtick from the wrap, which broke the command at any of its spaces."""
    from mqtool.table import wrap

    text = ("the broker's next start stops at the damaged record at 2218152 and drops 1092 messages after it "
            "(`mqtool verify '/tmp/on call/store' --keep-going` shows the damaged range, "
            "`mqtool dump '/tmp/on call/store' --keep-going` reads past it)")
    for width in range(52, 101):
        lines = wrap(text, width, commands=True)
        assert all(len(line) <= width for line in lines), (width, lines)
        for command in ("`mqtool verify '/tmp/on call/store' --keep-going`", "`mqtool dump '/tmp/on call/store' --keep-going`"):
            assert any(command in line for line in lines), (width, lines)


def test_a_plan_shown_without_yes_names_the_command_that_applies_it_and_that_command_does(tmp_path):
    """``recover``, ``rebuild-cq`` and ``apply PLAN`` without ``--yes`` refused with "re-run with --yes to apply it", and
    ``repair``'s plan ended "apply it with --yes": no command to paste, the options that matter (``--broker-config``,
    ``--backup-dir``, the queue, ``--normal``) left to retyping, the store's path with a space to quoting. Each now names
    the command as given; pasted as it is, it applies that plan (exit 0) with the backup where asked."""
    import re
    import shlex

    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    (store / "consumequeue" / "TopicTest" / "2" / "00000000000000000000").write_bytes(b"")  # something for rebuild-cq to do
    conf = tmp_path / "broker a.conf"
    conf.write_text("maxHashSlotNum=1000\nmaxIndexNum=4000\n")
    plan = tmp_path / "the plan.json"
    assert runner.invoke(app, ["recover", str(store), "--plan-out", str(plan)]).exit_code == 0
    asked = [["recover", str(store), "--broker-config", str(conf), "--backup-dir", str(tmp_path / "bk 1")],
             ["rebuild-cq", str(store), "--topic", "TopicTest", "--queue", "2", "--broker-version", "4.9.7", "--backup-dir", str(tmp_path / "bk 2")],
             ["repair", str(store), "--broker-version", "4.9.7", "--backup-dir", str(tmp_path / "bk 3")],
             ["apply", str(plan), "--backup-dir", str(tmp_path / "bk 4")],
             ["recover", str(store), "--normal", "--lost-limit", "5", "--backup-dir", str(tmp_path / "bk 5")]]  # not the abort file's mode
    for k, args in enumerate(asked, 1):
        shown = runner.invoke(app, args)
        assert shown.exit_code == (0 if args[0] == "repair" else 4), shown.output[-800:]
        said = shlex.split(re.search(r"apply it(?: with)?: (mqtool .*)$", shown.stderr.splitlines()[-1]).group(1))
        assert said[:3] == ["mqtool", *args[:2]] and sorted(said[3:]) == sorted([*args[2:], "--yes"]), (said, args)
        done = runner.invoke(app, said[1:])
        assert done.exit_code == 0 and (tmp_path / f"bk {k}").is_dir(), done.output[-800:]
        if "--normal" in args:  # the plan shown is the plan applied: the mode asked for kept in the pasted command
            assert json.loads((tmp_path / f"bk {k}" / "manifest.json").read_text(encoding="utf-8"))["plan"]["mode"] == "normal"
        restored = runner.invoke(app, ["restore", str(tmp_path / f"bk {k}"), "--yes"])
        assert restored.exit_code == 0, restored.output[-800:]


def test_the_command_finishing_an_interrupted_recover_keeps_its_broker_config(tmp_path):
    """``recover STORE --broker-config FILE --yes`` killed mid-apply. Before: ``info`` said ``run `mqtool recover STORE
    --yes` to finish it``: the broker.conf the plan was made with (its file sizes, index geometry) dropped from the
    command, which plans anew without it once the apply is finished (a repair's stages kept it). Now the command names it."""
    import re
    import shlex

    from repair_support import mqtool

    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    conf = tmp_path / "broker a.conf"
    conf.write_text("maxHashSlotNum=1000\nmaxIndexNum=4000\n")
    killed = mqtool("recover", store, "--broker-config", conf, "--yes", "--backup-dir", tmp_path / "bk", env={"MQTOOL_TEST_KILL_AT": "2"})
    assert killed.returncode == -9, killed.stderr
    line = runner.invoke(app, ["info", str(store)]).stderr.splitlines()[0]
    finish = shlex.split(re.search(r"run `([^`]*)` to finish it", line).group(1))
    assert finish == ["mqtool", "recover", str(store), "--broker-config", str(conf), "--yes"], line
    done = runner.invoke(app, finish[1:])
    assert done.exit_code == 0 and "the interrupted recover apply is finished" in done.stderr, done.output[-800:]


def test_verifys_summary_names_a_store_with_a_space_quoted(tmp_path):
    """Before: ``Summary /data/on call/store (broker ...)``, the one path of verify's output not quoted as every command
    after it quotes it (and the wrap broke it at the space). Now quoted: pasted, it is the store."""
    import re
    import shlex

    store = copy_store("4.9.7", "clean-small", tmp_path / "on call")
    shown = runner.invoke(app, ["verify", str(store)], env={"COLUMNS": "200"})
    named = re.search(r"^Summary (.*) \(broker ", shown.stdout, re.M).group(1)
    assert named == shlex.quote(str(store)) and shlex.split(named) == [str(store)]
