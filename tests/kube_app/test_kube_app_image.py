"""scripts/build-image: valid OCI image layouts (digests, sizes, media types), one static binary
per layer, the same bytes from two builds, the cache reused, `--check`, clear errors."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import json
import struct
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from oci_layout import OciLayout
from project_images import BUILD_IMAGE, go_or_skip, run_build_image

pytestmark = pytest.mark.timeout(600)  # the session's first build of the images may download modules

EXPECTED = {
    "app": {
        "ref": "servo-actors.local/app:dev",
        "binary": "app",
        "user": "65532:65532",
        "ports": {"8080/tcp": {}},
    },
    "pause": {"ref": "servo-actors.local/pause:dev", "binary": "pause", "user": "65535:65535", "ports": None},
}
PT_INTERP = 3


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def program_header_types(elf: bytes) -> list[int]:
    """The p_type of every program header of a 64-bit little-endian ELF file."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1, "not a 64-bit little-endian ELF file"
    (phoff,) = struct.unpack_from("<Q", elf, 32)
    phentsize, phnum = struct.unpack_from("<HH", elf, 54)
    return [struct.unpack_from("<I", elf, phoff + i * phentsize)[0] for i in range(phnum)]


@pytest.mark.parametrize("name", ["app", "pause"])
def test_archive_is_a_valid_oci_image_layout(image_archives: dict[str, Path], name: str) -> None:
    layout = OciLayout.read(image_archives[name])
    expected = EXPECTED[name]

    assert layout.json("oci-layout") == {"imageLayoutVersion": "1.0.0"}
    for blob_name, content in layout.members.items():
        if blob_name.startswith("blobs/"):
            assert blob_name == "blobs/sha256/" + hashlib.sha256(content).hexdigest()

    index = layout.index
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    [entry] = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"] == {
        "io.containerd.image.name": expected["ref"],
        "org.opencontainers.image.ref.name": "dev",
    }
    manifest_bytes = layout.blob(entry["digest"])
    assert (sha256(manifest_bytes), len(manifest_bytes)) == (entry["digest"], entry["size"])

    manifest = layout.manifest()
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    referenced = {entry["digest"], manifest["config"]["digest"], layer["digest"]}
    for descriptor in (manifest["config"], layer):
        blob = layout.blob(descriptor["digest"])
        assert (sha256(blob), len(blob)) == (descriptor["digest"], descriptor["size"])
    stored = {"sha256:" + n.rsplit("/", 1)[1] for n in layout.members if n.startswith("blobs/")}
    assert stored == referenced, "every blob is referenced, every reference is stored"

    config = layout.config()
    assert config["os"] == "linux"
    assert entry["platform"] == {"architecture": config["architecture"], "os": "linux"}
    assert config["rootfs"] == {"type": "layers", "diff_ids": [sha256(layout.layer_tar())]}
    runtime = config["config"]
    assert runtime["Entrypoint"] == [f"/{expected['binary']}"]
    assert runtime["User"] == expected["user"]
    assert runtime.get("ExposedPorts") == expected["ports"]
    assert any(variable.startswith("PATH=") for variable in runtime["Env"])

    files = layout.layer_files()
    assert list(files) == [expected["binary"]], "the layer holds the binary and nothing else"
    info, binary = files[expected["binary"]]
    assert (info.mode, info.uid, info.gid, info.mtime) == (0o755, 0, 0, 0)
    assert PT_INTERP not in program_header_types(binary), "the binary is static (no ELF interpreter)"


@pytest.mark.parametrize("name", ["app", "pause"])
def test_archive_entries_are_sorted_with_fixed_times(image_archives: dict[str, Path], name: str) -> None:
    layout = OciLayout.read(image_archives[name])
    assert layout.names == sorted(layout.names)
    assert all(info.mtime == 0 and info.uid == 0 and info.uname == "" for info in layout.infos)
    gzipped = layout.blob(layout.manifest()["layers"][0]["digest"])
    flags, mtime = gzipped[3], struct.unpack_from("<I", gzipped, 4)[0]
    assert (flags & 0x08, mtime) == (0, 0), "the gzip header carries no file name and no time"
    with tarfile.open(fileobj=io.BytesIO(layout.layer_tar())) as layer:
        assert all(info.mtime == 0 for info in layer)


def test_two_builds_give_the_same_bytes(image_archives: dict[str, Path], tmp_path: Path) -> None:
    outputs = []
    for run in ("first", "second"):
        done = run_build_image("--cache-dir", str(tmp_path / run), "all")
        assert done.returncode == 0, done.stderr
        outputs.append([Path(line) for line in done.stdout.splitlines()])
    first, second = outputs
    assert [path.name for path in first] == ["app.oci.tar", "pause.oci.tar"]
    for one, other in zip(first, second, strict=True):
        assert one.read_bytes() == other.read_bytes()
        assert one.relative_to(tmp_path / "first") == other.relative_to(tmp_path / "second")
    assert [path.read_bytes() for path in first] == [
        image_archives[name].read_bytes() for name in ("app", "pause")
    ], "the session's archives (the user's cache) have the same bytes"


def test_check_reports_what_is_missing_and_a_build_reuses_the_cache(
    image_archives: dict[str, Path], tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    missing = run_build_image("--check", "--cache-dir", cache, "pause")
    assert missing.returncode == 1
    assert "not built yet" in missing.stderr and "pause.oci.tar" in missing.stderr
    assert "Traceback" not in missing.stderr

    built = run_build_image("--cache-dir", cache, "pause")
    assert built.returncode == 0, built.stderr
    archive = Path(built.stdout.strip())
    stamp = archive.stat().st_mtime_ns

    checked = run_build_image("--check", "--cache-dir", cache, "pause")
    assert (checked.returncode, checked.stdout.strip()) == (0, str(archive))
    again = run_build_image("--cache-dir", cache, "pause")
    assert again.stdout.strip() == str(archive) and "building" not in again.stderr
    assert archive.stat().st_mtime_ns == stamp, "a present archive is reused, not rewritten"


def test_json_names_each_archive_its_reference_and_manifest_digest(
    image_archives: dict[str, Path],
) -> None:
    done = run_build_image("--check", "--json", "all")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"app", "pause"}
    for name, entry in answer.items():
        assert entry["ref"] == EXPECTED[name]["ref"]
        assert Path(entry["archive"]) == image_archives[name]
        assert (
            entry["manifest_digest"] == OciLayout.read(image_archives[name]).index["manifests"][0]["digest"]
        )


def test_an_unknown_image_is_named_without_a_traceback() -> None:
    go_or_skip()
    done = run_build_image("web")
    assert done.returncode == 1
    assert done.stderr.strip() == "build-image: no image named 'web'; known: app, pause (or all)"


def load_script() -> ModuleType:
    """scripts/build-image imported as its header tells another script to."""
    loader = importlib.machinery.SourceFileLoader("build_image_under_test", str(BUILD_IMAGE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[loader.name]
        raise
    return module


def test_functions_for_other_scripts(image_archives: dict[str, Path], tmp_path: Path) -> None:
    build_image = load_script()
    try:
        assert build_image.IMAGES["app"].ref == "servo-actors.local/app:dev"
        assert build_image.built("app") == image_archives["app"]
        assert build_image.built("app", tmp_path) is None
        assert build_image.build("app") == image_archives["app"]
        with pytest.raises(build_image.ImageError, match="no image named 'web'"):
            build_image.build("web")
    finally:
        del sys.modules["build_image_under_test"]
