"""Random corruption never makes ``verify`` crash or hang (bounded examples, fast)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import copy_store
from mqtool.cli import app
from mqtool.errors import MqtoolError
from mqtool.store import Store
from mqtool.verify import KINDS, Verification, VerifyOptions

TIME_LIMIT_S = 60


@pytest.fixture(scope="module", params=["4.9.7", "5.3.3"])
def store_root(request, tmp_path_factory):
    return copy_store(request.param, "clean-small", tmp_path_factory.mktemp("fuzz"))


def files_of(root: Path) -> dict[str, list[Path]]:
    return {
        "commitlog": sorted((root / "commitlog").iterdir()),
        "consumequeue": sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file()),
        "index": sorted((root / "index").iterdir()),
        "checkpoint": [root / "checkpoint"],
    }


corruption = st.tuples(
    st.sampled_from(["commitlog", "commitlog", "commitlog", "consumequeue", "index", "checkpoint"]),
    st.integers(min_value=0, max_value=10**9),  # which file
    st.floats(min_value=0, max_value=1),  # where in it
    st.one_of(st.binary(min_size=1, max_size=48), st.integers(min_value=1, max_value=9000).map(bytes)),
)


@contextmanager
def damaged(root: Path, corruptions):
    """Apply the corruptions, restore every byte afterwards."""
    saved = []
    try:
        for kind, which, where, data in corruptions:
            candidates = files_of(root)[kind]
            path = candidates[which % len(candidates)]
            size = path.stat().st_size
            at = int(where * max(size - 1, 0))
            data = data[: max(size - at, 0)]
            with open(path, "r+b") as f:
                f.seek(at)
                saved.append((path, at, f.read(len(data))))
                f.seek(at)
                f.write(data)
        yield
    finally:
        for path, at, original in reversed(saved):
            with open(path, "r+b") as f:
                f.seek(at)
                f.write(original)


@contextmanager
def time_limit(seconds: int):
    def fail(*_):
        raise TimeoutError(f"verify did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corruptions=st.lists(corruption, min_size=1, max_size=4), keep_going=st.booleans())
def test_random_corruption_yields_findings_not_crashes(store_root, corruptions, keep_going):
    with damaged(store_root, corruptions), time_limit(TIME_LIMIT_S):
        try:
            store = Store.open(store_root)
        except MqtoolError:
            return  # refused as bad input (exit 3): fine
        with store:
            run = Verification(store, VerifyOptions(keep_going=keep_going))
            try:
                findings = list(run.findings())
            except MqtoolError:
                return
    assert all(f.kind in KINDS for f in findings)
    assert run.summary.sound == (not any(f.severity.fails for f in findings))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corruptions=st.lists(corruption, min_size=1, max_size=3), cut=st.integers(min_value=0, max_value=5000))
def test_the_cli_answers_with_an_exit_code_never_a_traceback(store_root, corruptions, cut):
    victim = files_of(store_root)["commitlog"][1]
    original_size = victim.stat().st_size
    with damaged(store_root, corruptions), time_limit(TIME_LIMIT_S):
        saved = None
        if cut:
            with open(victim, "rb") as f:
                f.seek(original_size - cut)
                saved = f.read()
            os.truncate(victim, original_size - cut)
        try:
            result = CliRunner().invoke(app, ["verify", str(store_root), "--keep-going", "--format", "jsonl", "--no-progress"])
        finally:
            if saved is not None:
                with open(victim, "ab") as f:
                    f.write(saved)
    assert result.exit_code in (0, 1, 3), result.stderr
    assert "Traceback" not in result.stderr
    if result.exit_code == 3:
        assert result.stdout == "" and result.stderr.count("\n") == 1
