"""What ``--help`` calls a command's arguments: their names, as POSIX usage lines do
(``mqtool survivors [OPTIONS] STORE IDS_FILE``), not typer's ``{STORE}`` and ``TOPIC <str>``."""

from __future__ import annotations


def plain_arguments(command) -> None:
    """Show ``command``'s arguments by name alone (choices still listed) in its usage and help."""
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", None) != "argument" or not hasattr(param, "display_name_raw"):
            continue
        name = param.display_name_raw + ("..." if param.nargs != 1 and param.metavar is None else "")
        usage = name if param.required else f"[{name}]"
        choices = getattr(getattr(param, "type_descriptor", None), "is_choice", False)
        param._usage_display_name = lambda usage=usage: usage
        if not choices:
            param.display_type_rich = lambda ctx: None
