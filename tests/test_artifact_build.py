"""ArtifactBuild (pipelines/manifest.py): the one way every build step reuses a current artifact and writes a new one
(docs/architecture.md, "Artifacts")."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipelines.crashsafe import OWNER_FILE
from pipelines.manifest import MANIFEST_NAME, ArtifactBuild, fingerprint, read_manifest

INPUTS = {"data/source.csv": "ab" * 32}
PARAMS = {"seed": 1, "sizes": [1, 2]}


def build_once(folder: Path, inputs: dict = INPUTS, params: dict = PARAMS, text: str = "one") -> ArtifactBuild:
    build = ArtifactBuild(folder, "thing", inputs, params, domain="d")
    with build.writing() as draft:
        (draft.folder / "data.txt").write_text(text, encoding="utf-8")
        (draft.folder / "sub").mkdir()
        (draft.folder / "sub" / "more.txt").write_text(text * 2, encoding="utf-8")
        draft.record(rows={"lines": 1}, metadata={"wall_time_s": 0.5})
    return build


def test_a_build_writes_its_files_and_a_manifest_with_their_hashes(tmp_path: Path) -> None:
    folder = tmp_path / "thing"
    build = build_once(folder)
    manifest = read_manifest(folder)
    assert manifest == build.manifest and manifest.kind == "thing" and manifest.domain == "d"
    assert manifest.files == {"data.txt": hashlib.sha256(b"one").hexdigest(),
                              "sub/more.txt": hashlib.sha256(b"oneone").hexdigest()}  # every file but the manifest
    assert manifest.inputs == INPUTS and manifest.params == PARAMS and manifest.rows == {"lines": 1}
    assert manifest.metadata == {"wall_time_s": 0.5}  # a time figure: beside the fingerprint, not in it
    assert manifest.input_fingerprint == build.fingerprint == fingerprint(INPUTS, PARAMS)
    assert build.result().skipped is False and build.result().domain == "d"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]  # no temporary folder left


def test_named_files_and_given_hashes(tmp_path: Path) -> None:
    build = ArtifactBuild(tmp_path / "a", "thing", INPUTS, PARAMS)
    with build.writing() as draft:
        (draft.folder / "kept.txt").write_text("k", encoding="utf-8")
        (draft.folder / "scratch.txt").write_text("s", encoding="utf-8")
        draft.record(files=[draft.folder / "kept.txt"])
    assert build.manifest.files == {"kept.txt": hashlib.sha256(b"k").hexdigest()}
    given = ArtifactBuild(tmp_path / "b", "thing", INPUTS, PARAMS)
    with given.writing() as draft:
        draft.record(files={"table.lance": "c0ffee"})
    assert read_manifest(tmp_path / "b").files == {"table.lance": "c0ffee"}


def test_reused_when_inputs_and_params_match_rebuilt_when_they_differ_or_forced(tmp_path: Path) -> None:
    folder = tmp_path / "thing"
    assert ArtifactBuild(folder, "thing", INPUTS, PARAMS).reusable() is None  # nothing built yet
    built = build_once(folder).manifest
    same = ArtifactBuild(folder, "thing", dict(INPUTS), {"sizes": [1, 2], "seed": 1})  # key order does not matter
    assert same.reusable() == built and same.result(built, skipped=True).skipped
    assert same.reusable(force=True) is None
    assert ArtifactBuild(folder, "thing", {"data/source.csv": "cd" * 32}, PARAMS).reusable() is None
    assert ArtifactBuild(folder, "thing", INPUTS, {**PARAMS, "seed": 2}).reusable() is None
    assert ArtifactBuild(folder, "other_kind", INPUTS, PARAMS).reusable() is None


def test_a_failed_build_leaves_the_previous_artifact_whole_and_no_temporary_folder(tmp_path: Path) -> None:
    folder = tmp_path / "thing"
    build_once(folder, text="old")
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    build = ArtifactBuild(folder, "thing", INPUTS, {**PARAMS, "seed": 2}, owned=True)
    with pytest.raises(RuntimeError, match="boom"), build.writing() as draft:
        assert (draft.folder / OWNER_FILE).is_file()  # owned: a killed build's leftover names its process
        (draft.folder / "data.txt").write_text("new", encoding="utf-8")
        raise RuntimeError("boom")
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
    with pytest.raises(RuntimeError, match="not written yet"):
        build.manifest  # noqa: B018 - the property raises
    assert ArtifactBuild(folder, "thing", INPUTS, PARAMS).reusable() is not None  # still the current one


def test_an_owned_build_leaves_no_owner_marker_in_the_artifact(tmp_path: Path) -> None:
    build = ArtifactBuild(tmp_path / "thing", "thing", INPUTS, PARAMS, owned=True)
    with build.writing() as draft:
        (draft.folder / "data.txt").write_text("x", encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "thing").iterdir()) == ["data.txt", MANIFEST_NAME]
    assert set(build.manifest.files) == {"data.txt"}
