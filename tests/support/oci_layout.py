"""Reads an OCI image layout archive (a tar, as scripts/build-image writes it) for tests.

::

    layout = OciLayout.read(archive)
    layout.index, layout.manifest(), layout.config(), layout.layer_files()
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class OciLayout:
    members: dict[str, bytes]
    """Every regular file of the archive by its name."""
    names: list[str]
    """Every entry's name, in archive order (directories too)."""
    infos: list[tarfile.TarInfo]

    @classmethod
    def read(cls, archive: Path) -> OciLayout:
        members, names, infos = {}, [], []
        with tarfile.open(archive) as tar:
            for info in tar:
                names.append(info.name)
                infos.append(info)
                if info.isfile():
                    extracted = tar.extractfile(info)
                    assert extracted is not None
                    members[info.name] = extracted.read()
        return cls(members, names, infos)

    def json(self, name: str) -> Any:
        return json.loads(self.members[name])

    @property
    def index(self) -> Any:
        return self.json("index.json")

    def blob(self, digest: str) -> bytes:
        algorithm, _, hexdigest = digest.partition(":")
        return self.members[f"blobs/{algorithm}/{hexdigest}"]

    def manifest(self) -> Any:
        return json.loads(self.blob(self.index["manifests"][0]["digest"]))

    def config(self) -> Any:
        return json.loads(self.blob(self.manifest()["config"]["digest"]))

    def layer_tar(self) -> bytes:
        """The first layer, uncompressed."""
        return gzip.decompress(self.blob(self.manifest()["layers"][0]["digest"]))

    def layer_files(self) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
        files = {}
        with tarfile.open(fileobj=io.BytesIO(self.layer_tar())) as tar:
            for info in tar:
                content = b""
                if info.isfile():
                    extracted = tar.extractfile(info)
                    assert extracted is not None
                    content = extracted.read()
                files[info.name] = (info, content)
        return files
