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


def incident_quotes() -> tuple[str, list[str]]:
    """README's first screen (whitespace folded): its text block and every quote of its damage paragraph."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    screen = text[text.index("## The broker crashed") : text.index("## Install and test")]
    block = screen.split("```text\n", 1)[1].split("```", 1)[0]
    paragraph = " ".join(screen[screen.index("Damage before the segment") :].split("\n\n", 1)[0].split())
    return block, [a or b for a, b in re.findall(r"``(.+?)``|`([^`]+)`", paragraph)]


def said_as_quoted(quote: str, output: str) -> bool:
    """Whether ``output`` holds the pieces of ``quote`` between its ``...`` in that order (whitespace folded)."""
    pattern = ".*?".join(re.escape(piece.strip()) for piece in quote.split("...") if piece.strip())
    return re.search(pattern, " ".join(output.split())) is not None


def test_readme_incident_quotes_are_what_mqtool_prints(tmp_path):
    """Every output README's first screen quotes, reproduced on the 4.9.7 store it names with the damage it
    names: ``verify``'s first line as captured, the lines of a first segment overwritten (``salvage``), a body
    byte flipped in the third-from-last segment, the last segment cut short, a consume queue file cut short.
    Before, the last quote left out the ``(as E10, E12 ... brokers do)`` the line carries without
    ``--broker-version``, and three quotes named no store."""
    import shlex

    from conftest import copy_store, manifest
    from typer.testing import CliRunner

    from mqtool.cli import app

    def run(*argv) -> tuple[str, str]:
        result = CliRunner().invoke(app, [str(a) for a in argv], env={"COLUMNS": "1000"})
        return result.stdout, result.stderr

    block, quotes = incident_quotes()
    command, line = block.strip().splitlines()
    argv = shlex.split(command.removeprefix("$ mqtool "))
    assert run(*argv[:-1], ROOT / argv[-1])[0].splitlines()[0] == line

    (salvaged, crc, segment_cut, queue_cut) = (q for q in quotes if "..." in q)
    clean = copy_store("4.9.7", "clean-small", tmp_path / "zeroed")
    (clean / "commitlog" / f"{0:020d}").write_bytes(b"\xff" * (1 << 20))
    assert said_as_quoted(salvaged, run("salvage", clean, "-f", "csv")[1])

    clean = copy_store("4.9.7", "clean-small", tmp_path / "flipped")
    at = int(re.search(r"crc mismatch at (\d+)", crc)[1])
    victim = next(m for m in manifest("4.9.7", "clean-small")["messages"] if m["commitLogOffset"] == at)
    body = at + 96 + 100  # its 101st body byte: 96 header bytes before the body with IPv4 hosts (reference §2.1)
    assert victim["bodyLength"] > 100 and "[" not in victim["bornHost"] + victim["storeHost"]
    with open(clean / "commitlog" / f"{body >> 20 << 20:020d}", "r+b") as f:
        f.seek(body % (1 << 20))
        byte = f.read(1)[0]
        f.seek(body % (1 << 20))
        f.write(bytes([byte ^ 0xFF]))
    assert said_as_quoted(crc, run("verify", clean)[0].splitlines()[0])

    clean = copy_store("4.9.7", "clean-small", tmp_path / "cut")
    name, size = re.search(r"(\d{20}): (\d+) bytes", segment_cut).groups()
    with open(clean / "commitlog" / name, "r+b") as f:
        f.truncate(int(size))
    assert said_as_quoted(segment_cut, run("verify", clean)[0].splitlines()[0])

    crashed = copy_store("4.9.7", "crashed-small", tmp_path / "queue")
    path, size = re.search(r"(consumequeue/\S+): (\d+) bytes", queue_cut).groups()
    with open(crashed / path, "r+b") as f:
        f.truncate(int(size))
    assert said_as_quoted(queue_cut, run("verify", crashed)[0].splitlines()[0])


def test_readme_exit_codes_are_mqtools():
    """The codes of README's "Exit codes" table and of its first screen's list are the ones ``mqtool.errors`` defines,
    with 130 for an interrupt: a code added, renumbered or dropped is documented in both."""
    from mqtool import errors

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Exit codes\n", 1)[1].split("\n\n## ", 1)[0]
    listed = " ".join(text[text.index("Exit codes: 0 ok") :].split("([Exit codes]", 1)[0].split())
    codes = {value for name, value in vars(errors).items() if name.startswith("EXIT_")} | {130}
    assert {int(c) for c in re.findall(r"^\| (\d+) \|", table, flags=re.M)} == codes
    assert {int(c) for c in re.findall(r"(?:: |, )(\d+) [a-z]", listed)} == codes, listed
