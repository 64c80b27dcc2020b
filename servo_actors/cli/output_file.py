"""Writing a file a command produces (``init``, ``import-servox``): atomically, with its mode.

A temporary file beside the target, written, given ``mode``, then renamed over it: a reader never
sees half a file, and a file that holds a token is never readable by others, not even briefly.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_file"]


def write_file(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` atomically, with permission bits ``mode``."""
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
