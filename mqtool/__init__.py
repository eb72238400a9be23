"""mqtool: offline decoder, checker and repair kit for Apache RocketMQ store directories."""

import importlib.util as _util
from pathlib import Path as _Path

__version__ = "0.1.0"

# In a source checkout ``formats/`` and ``recovery/`` sit beside this directory; pyproject.toml
# maps them into the package when it is installed (also editable). A Python without mqtool
# installed that imports this directory from the checkout (a Spark Python worker started in it:
# the working directory comes first on its path, before the --py-files zip) finds them there.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "formats" / "__init__.py").is_file() and _util.find_spec(__name__ + ".formats") is None:
    __path__.append(str(_checkout))
