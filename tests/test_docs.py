"""docs/commands.md is the commands' own ``--help``: regenerated in memory and compared, as sqlite-utils does."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_commands_page_is_current():
    generated = load_generator().render()
    assert (ROOT / "docs" / "commands.md").read_text(encoding="utf-8") == generated, "docs/commands.md is stale: run python docs/generate.py"


def test_commands_page_covers_every_command():
    from mqtool.cli import LAZY_COMMANDS

    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    for name in LAZY_COMMANDS:
        assert f"## `mqtool {name}`" in page
    for name in ("key", "uniq-key", "msg-id", "offset", "time"):
        assert f"## `mqtool query {name}`" in page


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page (lower case, punctuation dropped, spaces to -)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_readme_and_docs_links_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists, and a heading of it."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            linked = (page.parent / target) if target else page
            assert linked.exists(), f"{page.name}: {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), f"{page.name}: {target}#{anchor}"


def test_readme_incident_commands_work_as_written(tmp_path):
    """The five commands of README's first screen, run as written on a copy of 4.9.7
    ``crashed-small``: each exits as the README says, and ``salvage``'s OUT holds every message
    with its msg id (before: ``salvage STORE --out OUT`` wrote the terminal table, its msg id and
    size columns left out to fit the width)."""
    import json
    import shlex

    from conftest import copy_store, manifest
    from typer.testing import CliRunner

    from mqtool.cli import app

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("## The broker crashed") :].split("```sh\n", 1)[1].split("```", 1)[0]
    store, out = copy_store("4.9.7", "crashed-small", tmp_path / "store"), tmp_path / "OUT"
    codes = {}
    for line in block.splitlines():
        argv = shlex.split(line.split("#", 1)[0])
        argv = [str(store) if a == "STORE" else str(out) if a.startswith("OUT") else a for a in argv[1:]]
        codes[argv[0]] = CliRunner().invoke(app, argv, env={"COLUMNS": "100"}).exit_code
    assert codes == {"info": 0, "verify": 1, "recover": 4, "repair": 0, "salvage": 0}  # a crashed store: not sound
    salvaged = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["msg_id"] for r in salvaged) == sorted(m["msgId"] for m in manifest("4.9.7", "crashed-small")["messages"])
