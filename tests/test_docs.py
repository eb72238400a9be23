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
