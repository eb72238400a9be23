"""A config file the broker passes over with a ``.bak`` it cannot load (``ConfigManager.load``/``loadBak`` 3.2.6-5.3.3):
``loadBak`` catches the throw of ``file2String`` (a directory) or ``decode`` (malformed JSON) and returns false, so the load
that asked fails the start; a missing or empty ``.bak`` reads as nothing and returns true. Which files load where, by era
(``BrokerController.initialize``, ``DefaultMessageStore.load``, ``TimerMessageStore.load``): the next start's line, ``verify``,
``recover``'s refusal, ``repair``'s quarantine undone exactly by ``restore``."""

from __future__ import annotations

import json

import pytest
from conftest import copy_store, store_path
from test_load_strays import run, snapshot, verified
from test_single_files import into_directory

from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED

REFUSES = "the broker's next start refuses to start: "


def first_lines(out: str) -> str:
    return " ".join(out.split("\n")[:8])


def config_errors(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f["kind"] == "config-unreadable" and f["severity"] == "error"]


def with_config(root, name: str, main: bytes | None, bak: bytes | None) -> None:
    """``root``'s ``config/<name>`` and its ``.bak`` set to ``main`` and ``bak`` (None: no such file)."""
    (root / "config").mkdir(exist_ok=True)
    for path, data in ((root / "config" / name, main), (root / "config" / f"{name}.bak", bak)):
        path.unlink(missing_ok=True)
        if data is not None:
            path.write_bytes(data)


@pytest.mark.parametrize("version, name", [("4.0.0", "clean-small"), ("4.9.7", "config-real"), ("5.3.3", "config-real")])
def test_malformed_bak_refuses_start_then_repaired(tmp_path, version, name):
    """topics.json missing, its .bak malformed: ``decode`` throws, ``loadBak`` returns false, the broker refuses to start.
    ``repair`` moves the .bak out (``loadBak`` then reads null and returns true: the broker starts); ``restore`` undoes."""
    root = copy_store(version, name, tmp_path)
    with_config(root, "topics.json", None, b'{"topicConfigTable":{')
    code, out, findings = verified(root, version)
    assert first_lines(out).startswith(REFUSES + "config/topics.json.bak: topics.json is not JSON fastjson can read")
    assert [f["file"] for f in config_errors(findings)] == ["config/topics.json"]
    assert "refuses to start" in config_errors(findings)[0]["message"]
    refused = run("recover", root, "--broker-version", version)
    assert refused.exit_code == EXIT_BAD_INPUT and "config/topics.json.bak" in refused.stderr and "Traceback" not in refused.stderr
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert not (root / "config/topics.json.bak").exists()
    _, out, findings = verified(root, version)
    assert "refuses" not in first_lines(out) and not config_errors(findings)
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


def test_non_ascii_malformed_bak_read_as_null_by_4_0_0(tmp_path):
    """3.2.6 and 4.0.0 read a non-ASCII file as null (``FileReader`` into a char array of the byte length; rules 7.4), on
    which ``loadBak`` returns true: the broker starts (with an empty table); 4.1.0+ decode it, throw and refuse."""
    root = copy_store("4.0.0", "clean-small", tmp_path)
    with_config(root, "subscriptionGroup.json", b"", '{"subscriptionGroupTable":{"é"'.encode())
    _, out, findings = verified(root, "4.0.0")
    assert "refuses" not in first_lines(out)
    assert [f["message"].endswith("so the broker starts with an empty table") for f in config_errors(findings)] == [True]
    _, out, findings = verified(root, "4.5.1")
    assert first_lines(out).startswith(REFUSES + "config/subscriptionGroup.json.bak: subscriptionGroup.json is not JSON")


def test_consumer_filter_loaded_from_4_1_0(tmp_path):
    """``ConsumerFilterManager`` (4.1.0+) loads consumerFilter.json after the first three: a .bak that is a directory
    where the file is missing refuses the start of a 4.5.1 broker; 3.2.6 and 4.0.0 never read the file."""
    root = copy_store("4.0.0", "clean-small", tmp_path)
    (root / "config").mkdir()
    into_directory(root, "config/consumerFilter.json.bak")
    _, out, findings = verified(root, "4.0.0")
    assert "refuses" not in first_lines(out) and not [f for f in findings if f["file"].startswith("config/")]
    _, out, findings = verified(root, "4.5.1")
    assert first_lines(out).startswith(REFUSES + "config/consumerFilter.json.bak: a directory, which FileInputStream cannot read")
    assert [f["file"] for f in config_errors(findings)] == ["config/consumerFilter.json"]


@pytest.mark.parametrize("version, name, early", [("4.5.1", "crashed-small", True), ("4.9.7", "config-real", False),
                                                   ("5.3.3", "config-real", False)])
def test_delay_offset_bak_refusal_where_it_loads(tmp_path, version, name, early):
    """``ScheduleMessageService.load`` reads delayOffset.json first in ``DefaultMessageStore.load`` up to 4.9.1 (no recovery
    runs), after the recovery from 4.9.2 (the line gives what the start does once it is fixed)."""
    root = copy_store(version, name, tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config/delayOffset.json").unlink(missing_ok=True)
    into_directory(root, "config/delayOffset.json.bak")
    _, out, findings = verified(root, version)
    line = first_lines(out)
    assert line.startswith(REFUSES + "config/delayOffset.json.bak: a directory")
    assert ("with that file fixed" in line) is not early
    assert [f["file"] for f in config_errors(findings)] == ["config/delayOffset.json"]
    doc = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)
    assert "config/delayOffset.json.bak" in json.dumps(doc)


def test_timer_metrics_bak_refuses_5_x_start(tmp_path):
    """``TimerMessageStore.load`` loads ``config/timermetrics`` after the timer log: a malformed .bak where the file is
    missing fails it, after the recovery."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    with_config(root, "timermetrics", None, b"{[")
    _, out, findings = verified(root, "5.3.3")
    line = first_lines(out)
    assert line.startswith(REFUSES + "config/timermetrics.bak: timermetrics is not JSON") and "with that file fixed" in line
    assert [f["file"] for f in config_errors(findings)] == ["config/timermetrics"]


def test_object_without_its_table_is_decoded(tmp_path):
    """The broker's ``decode`` reads ``{}`` without a throw (the class keeps its empty table): as the file it is loaded and
    the .bak never read; as the .bak, ``loadBak`` returns true. Neither refuses the start; ``[]`` as the .bak does."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    for main, bak in ((b"{}", b"{"), (None, b"{}")):
        with_config(root, "subscriptionGroup.json", main, bak)
        _, out, findings = verified(root, "4.9.7")
        assert "refuses" not in first_lines(out) and not [f for f in config_errors(findings) if "refuses" in f["message"]]
    with_config(root, "subscriptionGroup.json", None, b"[]")
    _, out, findings = verified(root, "4.9.7")
    assert first_lines(out).startswith(REFUSES + "config/subscriptionGroup.json.bak: subscriptionGroup.json is not a JSON object")


@pytest.mark.parametrize("version, refuses", [("3.2.6", False), ("4.0.0", False), ("4.5.1", True)])
def test_bak_directory_read_as_null_before_4_1_0(tmp_path, version, refuses):
    """3.2.6's and 4.0.0's ``MixAll.file2String`` catches the ``FileReader``'s ``IOException`` on a directory and returns
    null, so ``loadBak`` returns true and the broker starts; 4.1.0+'s throws it, ``loadBak`` returns false."""
    root = copy_store(version, "crashed-small", tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config/consumerOffset.json").unlink(missing_ok=True)
    into_directory(root, "config/consumerOffset.json.bak")
    _, out, findings = verified(root, version)
    assert first_lines(out).startswith(REFUSES + "config/consumerOffset.json.bak: a directory") is refuses
    assert bool([f for f in config_errors(findings) if "refuses to start" in f["message"]]) is refuses


def test_null_table_as_each_manager_decodes_it(tmp_path):
    """fastjson sets a field written ``null`` to null (``{"offsetTable":null}``). ``ConsumerOffsetManager.decode`` keeps it
    (``this.offsetTable = obj.offsetTable`` 3.2.6-5.3.3): the file is loaded, its .bak unread, and the broker runs with no
    offset table; ``ConsumerFilterManager.decode`` skips it; the others' ``putAll(null)`` throws (the .bak is loaded, and
    as the .bak it refuses the start). Before: every null table was undecodable, so the consumer offsets shown were the
    .bak's, and a null consumerOffset.json.bak or consumerFilter.json.bak refused the start."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    bak_rows = json.loads(run("offsets", root, "--broker-version", "4.9.7", "-f", "json").stdout)
    assert [r for r in bak_rows if r["kind"] == "consumer"]
    (root / "config/consumerOffset.json").write_bytes(b'{"offsetTable":null}')
    _, out, findings = verified(root, "4.9.7")
    assert "refuses" not in first_lines(out)
    assert [(f["file"], f["severity"], f["message"]) for f in config_errors(findings)] == [(
        "config/consumerOffset.json", "error", "config/consumerOffset.json: its 'offsetTable' is null, which ConsumerOffsetManager.decode "
        "keeps (this.offsetTable = obj.offsetTable, no throw): the broker starts with no offset table, and each offset commit "
        "or query throws a NullPointerException")]
    rows = json.loads(run("offsets", root, "--broker-version", "4.9.7", "-f", "json").stdout)
    assert [r for r in rows if r["kind"] == "consumer"] == [] and rows == [r for r in bak_rows if r["kind"] != "consumer"]
    for name, table, refuses in (("consumerOffset.json", "offsetTable", False), ("consumerFilter.json", "filterDataByTopic", False),
                                 ("topics.json", "topicConfigTable", True), ("delayOffset.json", "offsetTable", True)):
        with_config(root, name, None, f'{{"{table}":null}}'.encode())
        _, out, findings = verified(root, "4.9.7")
        assert ("refuses to start: config/" + name + ".bak" in first_lines(out)) is refuses, name
        assert bool([f for f in config_errors(findings) if "refuses to start" in f["message"]]) is refuses, name
        with_config(root, name, None, None)


@pytest.mark.parametrize("version", ["3.2.6", "4.0.0"])
def test_non_ascii_file_read_as_null_by_3_2_6_and_4_0_0(tmp_path, version):
    """3.2.6's and 4.0.0's ``file2String`` reads a non-ASCII file as null (its ``FileReader`` fills fewer chars than the
    byte length; rules 7.4): the file itself too, not only its .bak, so ``ConfigManager.load`` loads the .bak. On copies of
    the real ``clean-small`` with the real 4.9.7 broker's consumerOffset.json (a topic named in three scripts): the .bak's
    offsets are the ones loaded, an undecodable .bak refuses the start (``repair`` moves it out, ``restore`` undoes), where
    4.1.0+ load the file. Before: the file was read as 4.1.0+ read it whatever the release."""
    root = copy_store(version, "clean-small", tmp_path)
    real = (store_path("4.9.7", "config-real") / "config/consumerOffset.json").read_bytes()
    chars = len(real.decode())
    assert chars < len(real)
    with_config(root, "consumerOffset.json", real, b'{"offsetTable":{"TopicTest@ascii_group":{0:1}}}')
    for given, from_bak in ((version, True), ("4.5.1", False)):
        rows = json.loads(run("offsets", root, "--broker-version", given, "-f", "json").stdout)
        assert ({r["group"] for r in rows if r["kind"] == "consumer"} == {"ascii_group"}) is from_bak, given
        _, out, findings = verified(root, given)
        warned = [f["message"] for f in findings if f["kind"] == "config-unreadable"]
        passed_over = (f"config/consumerOffset.json: {len(real)} bytes a FileReader reads as {chars} chars, which 3.2.6's and 4.0.0's "
                       "file2String reads as null; the broker loads consumerOffset.json.bak instead")
        assert warned == ([passed_over] if from_bak else []), given
    with_config(root, "consumerOffset.json", real, b'{"offsetTable":{')
    for given, refuses in ((version, True), ("4.5.1", False)):
        _, out, findings = verified(root, given)
        assert first_lines(out).startswith(REFUSES + "config/consumerOffset.json.bak: consumerOffset.json is not JSON") is refuses
        assert [f["file"] for f in config_errors(findings)] == (["config/consumerOffset.json"] if refuses else []), given
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_FINDINGS and "quarantine config/consumerOffset.json.bak" in applied.stderr, applied.stderr
    assert not (root / "config/consumerOffset.json.bak").exists()
    _, out, findings = verified(root, version)  # the file still null to it: the broker starts with an empty table
    assert "refuses" not in first_lines(out) and [f["file"] for f in config_errors(findings)] == ["config/consumerOffset.json"]
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


@pytest.mark.parametrize("version", ["4.9.2", "4.9.7"])
def test_recover_before_a_config_refusal_after_the_recovery(tmp_path, version):
    """4.9.2+ load delayOffset.json after ``DefaultMessageStore.load``'s recovery (``ScheduleMessageService.load`` @4.9.2,
    4.9.7): a start on a .bak that is a directory runs the recovery, then fails. ``recover`` plans and applies that
    recovery, its plan saying so (before: it said the start refuses, and applied, without a word on why); after it,
    verify's line is the plan's (the refusal, then what the start keeps), and once ``repair`` moved the .bak out the start
    keeps what the plan said."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    (root / "config").mkdir(exist_ok=True)
    into_directory(root, "config/delayOffset.json.bak")
    planned = run("recover", root, "--broker-version", version, "--format", "json")
    plan = json.loads(planned.stdout)
    assert planned.exit_code == EXIT_REFUSED and plan["next_start"]["line"].startswith(REFUSES + "config/delayOffset.json.bak: a directory")
    assert plan["notes"] == ["the broker's own next start runs this recovery too, then refuses (it loads config/delayOffset.json "
                             "after it): these writes stand either way, and the refusal stays until config/delayOffset.json or its "
                             ".bak is fixed (`mqtool repair` moves the .bak out)"]
    assert run("recover", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b1").exit_code == EXIT_OK
    _, out, _ = verified(root, version)
    keeps = plan["next_start"]["line"].split("; with that file fixed, it ")[1].split("; ")[0]
    assert first_lines(out).startswith(REFUSES + "config/delayOffset.json.bak") and f"with that file fixed, it {keeps}" in first_lines(out)
    assert run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b2").exit_code == EXIT_OK
    _, out, _ = verified(root, version)
    assert first_lines(out).startswith(f"the broker's next start {keeps}")
