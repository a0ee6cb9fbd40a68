"""params.yaml (profiles, validation, path resolution) and the domain registry file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pipelines.config import PARAMS_ENV, PROFILE_ENV, load_params, resolve_params
from pipelines.domains import Domain, Registry, SourceSpec, add_domain, load_registry, save_registry
from pipelines.errors import ConfigError, RegistryError
from tests.conftest import PROJECT_ROOT

REAL_PARAMS = PROJECT_ROOT / "params.yaml"
REAL_REGISTRY = PROJECT_ROOT / "kg_assets" / "domains.yaml"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.delenv(PARAMS_ENV, raising=False)


def params_copy(tmp_path: Path, edit=None) -> Path:  # noqa: ANN001
    """The real params.yaml, optionally edited as data, written to tmp_path/conf/params.yaml."""
    raw = yaml.safe_load(REAL_PARAMS.read_text(encoding="utf-8"))
    if edit:
        edit(raw)
    path = tmp_path / "conf" / "params.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------- profiles


def test_real_params_default_profile_is_quick() -> None:
    params = load_params(REAL_PARAMS)
    assert params.profile == "quick"
    assert params.index.batch_size == 64 and params.index.device == "cpu"
    assert params.index.encoder == "all-MiniLM-L6-v2" and params.index.text == "name"
    assert (params.seeds.depth, params.seeds.min_nodes, params.seeds.max_nodes) == (3, 20, 400)
    assert params.checks.min_description_share == 0.5 and params.checks.max_isolated_share == 0.5
    assert params.root == PROJECT_ROOT
    assert params.section("seeds") == {"depth": 3, "min_nodes": 20, "max_nodes": 400}


def _leaves(value: object, path: str = "") -> dict[str, object]:
    """Every scalar or list of a nested mapping by its dotted key."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{path}.{key}" if path else key).items()}
    return {path: value}


def test_code_defaults_are_the_base_values_of_params_yaml() -> None:
    """One source of truth: every base value params.yaml states is the pydantic default (so a reader of
    config.py sees the numbers that run), and params.yaml states every setting (so a user sees every knob)."""
    from pipelines.config import Params

    raw = yaml.safe_load(REAL_PARAMS.read_text(encoding="utf-8"))
    stated = _leaves({k: v for k, v in raw.items() if k not in ("profile", "profiles")})
    defaults = _leaves(Params().model_dump(mode="json", exclude={"profile"}))
    differing = {key: (defaults.get(key), value) for key, value in stated.items() if defaults.get(key) != value}
    assert not differing, f"config.py default vs params.yaml base value: {differing}"
    assert not sorted(set(defaults) - set(stated)), "settings params.yaml does not state"


def test_an_rl_stage_generates_with_its_own_backend_or_else_the_agents() -> None:
    from pipelines.config import AgentParams, RLStageParams

    onnx_agent = AgentParams(backend="onnx")
    assert RLStageParams().rollout_backend(onnx_agent) == "transformers"  # params.yaml's choice for a CPU
    assert RLStageParams(backend=None).rollout_backend(onnx_agent) == "onnx"
    assert RLStageParams(backend="onnx").rollout_backend(AgentParams()) == "onnx"


def test_paper_profile_by_argument_applies_its_overrides_only() -> None:
    quick = load_params(REAL_PARAMS)
    paper = load_params(REAL_PARAMS, profile="paper")
    assert paper.profile == "paper"
    assert paper.index.batch_size == 256 and paper.index.device == "auto"
    # everything the profile does not state keeps the base value
    assert paper.index.model_dump(exclude={"batch_size", "device"}) == \
        quick.index.model_dump(exclude={"batch_size", "device"})
    assert paper.seeds == quick.seeds and paper.checks == quick.checks and paper.paths == quick.paths


def test_profile_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, "paper")
    from_env = load_params(REAL_PARAMS)
    assert from_env.profile == "paper" and from_env.index.batch_size == 256
    assert load_params(REAL_PARAMS, profile="quick").index.batch_size == 64  # the argument wins
    monkeypatch.setenv(PROFILE_ENV, "nope")
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        load_params(REAL_PARAMS)


def test_profile_key_in_file_selects_the_profile(tmp_path: Path) -> None:
    path = params_copy(tmp_path, lambda raw: raw.update(profile="paper"))
    assert load_params(path).index.batch_size == 256
    assert load_params(path, profile="quick").index.batch_size == 64


def test_unknown_profile_lists_known_profiles() -> None:
    with pytest.raises(ConfigError) as info:
        load_params(REAL_PARAMS, profile="huge")
    message = str(info.value)
    assert str(REAL_PARAMS) in message and "unknown profile 'huge'" in message and "['paper', 'quick']" in message


def test_profile_overrides_merge_deeply(tmp_path: Path) -> None:
    def edit(raw: dict) -> None:
        raw["profiles"]["deep"] = {"seeds": {"depth": 2}, "checks": {"max_isolated_share": 0.1}}

    params = load_params(params_copy(tmp_path, edit), profile="deep")
    assert (params.seeds.depth, params.seeds.min_nodes, params.seeds.max_nodes) == (2, 20, 400)
    assert params.checks.max_isolated_share == 0.1 and params.checks.min_description_share == 0.5


# --------------------------------------------------------------------------------------------- validation


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = params_copy(tmp_path, lambda raw: raw["index"].update(bach_size=32))
    with pytest.raises(ConfigError) as info:
        load_params(path)
    message = str(info.value)
    assert str(path) in message and "index.bach_size" in message and "unknown key" in message


def test_unknown_key_in_a_profile_is_reported(tmp_path: Path) -> None:
    path = params_copy(tmp_path, lambda raw: raw["profiles"]["paper"]["index"].update(bach_size=32))
    assert load_params(path).index.batch_size == 64  # not selected: not validated
    with pytest.raises(ConfigError, match=r"index\.bach_size: unknown key"):
        load_params(path, profile="paper")


def test_unknown_top_level_section(tmp_path: Path) -> None:
    path = params_copy(tmp_path, lambda raw: raw.update(seed={"depth": 2}))
    with pytest.raises(ConfigError, match=r"seed: unknown key"):
        load_params(path)


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    path = params_copy(tmp_path, lambda raw: raw["seeds"].update(depth="three"))
    with pytest.raises(ConfigError) as info:
        load_params(path)
    message = str(info.value)
    assert str(path) in message and "seeds.depth" in message and "'three'" in message


@pytest.mark.parametrize(("section", "key", "value"), [
    ("seeds", "depth", 0),
    ("index", "batch_size", -1),
    ("index", "device", "tpu"),
    ("index", "text", "everything"),
    ("checks", "min_description_share", 1.5),
])
def test_out_of_range_values_are_refused(tmp_path: Path, section: str, key: str, value: object) -> None:
    path = params_copy(tmp_path, lambda raw: raw[section].update({key: value}))
    with pytest.raises(ConfigError, match=rf"{section}\.{key}"):
        load_params(path)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("index:\n  batch_size: [1, 2\nseeds: {depth: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    assert str(path) in str(info.value) and "not valid YAML" in str(info.value)


def test_non_mapping_file_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_params(path)
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "absent.yaml")


def test_profile_that_is_not_a_mapping_is_a_config_error(tmp_path: Path) -> None:
    """A profile whose body is not a mapping must be refused with a ConfigError naming it."""
    path = params_copy(tmp_path, lambda raw: raw["profiles"].update(paper=["index", "batch_size"]))
    with pytest.raises(ConfigError, match="paper"):
        load_params(path, profile="paper")


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("", encoding="utf-8")
    params = load_params(path)
    assert params.profile == "quick" and params.seeds.depth == 3 and params.root == tmp_path.resolve()


def test_resolve_params_validates_merged_values() -> None:
    raw = {"seeds": {"depth": 2}, "profiles": {"quick": {}, "wide": {"seeds": {"max_nodes": "many"}}}}
    assert resolve_params(raw, "quick", source="x.yaml").seeds.depth == 2
    with pytest.raises(ConfigError, match=r"x\.yaml.*\n.*seeds\.max_nodes"):
        resolve_params(raw, "wide", source="x.yaml")


# --------------------------------------------------------------------------------------------- paths


def test_relative_paths_resolve_against_the_params_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params_copy(tmp_path, lambda raw: raw["paths"].update(artifacts="out/artifacts"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    params = load_params(Path("..") / "conf" / "params.yaml")
    conf = (tmp_path / "conf").resolve()
    assert params.root == conf
    assert params.registry_path == conf / "kg_assets" / "domains.yaml"
    assert params.artifacts_dir == conf / "out" / "artifacts"


def test_params_file_found_from_env_or_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = params_copy(tmp_path, lambda raw: raw["seeds"].update(depth=5))
    nested = path.parent / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    found = load_params()
    assert found.seeds.depth == 5 and found.root == path.parent.resolve()
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(REAL_PARAMS, other / "custom.yaml")
    monkeypatch.setenv(PARAMS_ENV, str(other / "custom.yaml"))
    from_env = load_params()
    assert from_env.seeds.depth == 3 and from_env.root == other.resolve()


# --------------------------------------------------------------------------------------------- registry


def test_registry_round_trip_of_the_real_file(tmp_path: Path) -> None:
    registry = load_registry(REAL_REGISTRY)
    assert registry.names[:3] == ["chemistry", "geography", "medicine"]
    assert registry.get("chemistry").source.kind == "triples"
    assert registry.get("chemistry").source.is_directed
    saved = tmp_path / "domains.yaml"
    save_registry(saved, registry)
    again = load_registry(saved)
    assert again == registry
    assert again.names == registry.names
    on_disk = yaml.safe_load(saved.read_text(encoding="utf-8"))
    assert on_disk == yaml.safe_load(REAL_REGISTRY.read_text(encoding="utf-8"))
    assert list(on_disk["domains"]) == registry.names  # file order is kept
    assert saved.read_text(encoding="utf-8").startswith("#")
    assert [p.name for p in tmp_path.iterdir()] == ["domains.yaml"]  # no temporary file left


def test_registry_round_trip_keeps_optional_fields(tmp_path: Path) -> None:
    registry = Registry(domains=[
        Domain(name="rag", description="Ünïcode description",
               source=SourceSpec(kind="lightrag_graphml", path="kg_assets/rag/g.graphml", directed=True)),
        Domain(name="plain", source=SourceSpec(kind="triples", path="t.jsonl", entities="e.jsonl")),
    ])
    path = tmp_path / "domains.yaml"
    save_registry(path, registry)
    again = load_registry(path)
    assert again == registry
    assert again.get("rag").source.is_directed is True
    assert "directed" not in yaml.safe_load(path.read_text(encoding="utf-8"))["domains"]["plain"]["source"]
    assert "Ünïcode" in path.read_text(encoding="utf-8")


def test_add_domain_refuses_duplicates_unless_replace(tmp_path: Path) -> None:
    path = tmp_path / "kg_assets" / "domains.yaml"
    shutil.copytree(REAL_REGISTRY.parent, path.parent, ignore=lambda folder, names: [
        n for n in names if n != "domains.yaml"])
    before = path.read_bytes()
    duplicate = Domain(name="geography", description="replaced",
                       source=SourceSpec(kind="lightrag_graphml", path="kg_assets/geo.graphml"))
    with pytest.raises(RegistryError) as info:
        add_domain(path, duplicate)
    assert "'geography' already exists" in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == before

    embedded = load_registry(REAL_REGISTRY).names
    added = add_domain(path, Domain(name="solar", source=SourceSpec(kind="triples", path="s.csv")))
    assert added.names == [*embedded, "solar"]
    assert load_registry(path) == added

    replaced = add_domain(path, duplicate, replace=True)
    assert replaced.names == [*embedded, "solar"]  # replaced in place
    reloaded = load_registry(path)
    assert reloaded.get("geography").description == "replaced"
    assert reloaded.get("geography").source.kind == "lightrag_graphml"
    assert reloaded.get("chemistry") == load_registry(REAL_REGISTRY).get("chemistry")


def test_add_domain_creates_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "new" / "domains.yaml"
    registry = add_domain(path, Domain(name="solar", source=SourceSpec(kind="triples", path="s.csv")))
    assert registry.names == ["solar"] and load_registry(path).names == ["solar"]


@pytest.mark.parametrize(("text", "fragment"), [
    ("domains:\n  solar: [1, 2]\n", "expected a mapping"),
    ("domains:\n  solar:\n    source: {kind: excel, path: x.xlsx}\n", "source.kind"),
    ("domains:\n  solar:\n    source: {kind: triples}\n", "source.path"),
    ("domains:\n  solar:\n    source: {kind: triples, path: t.csv, colour: red}\n", "colour"),
    ("domains: {solar: {source: {kind: triples, path: t.csv}\n", "not valid YAML"),
    ("domains:\n  solar:\n    source: {kind: triples, path: a.csv}\n  solar:\n    source: {kind: triples, path: b.csv}\n",
     "duplicate key 'solar'"),
])
def test_malformed_registry(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "domains.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_missing_registry(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="domain registry not found"):
        load_registry(tmp_path / "domains.yaml")


def test_booleans_are_not_silently_taken_for_numbers(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("seeds:\n  depth: true\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    assert "seeds.depth" in str(info.value)


# --------------------------------------------------------------------------------------------- domain filters


def test_select_domains_keeps_registry_order_and_names_what_is_wrong() -> None:
    from pipelines.domains import select_domains

    names = ["chemistry", "geography", "medicine"]
    assert select_domains(names) == names
    assert select_domains(names, ["medicine", "chemistry"]) == ["chemistry", "medicine"]
    assert select_domains(names, None, ["medicine"]) == ["chemistry", "geography"]
    with pytest.raises(RegistryError, match=r"eval\.domains/exclude_domains: unknown domain\(s\) 'medcine'; "
                                            r"registered domains: chemistry, geography, medicine"):
        select_domains(names, ["medcine"], what="eval")
    with pytest.raises(RegistryError, match=r"sft_data\.domains/exclude_domains select no domain"):
        select_domains(names, None, names, what="sft_data")
    with pytest.raises(RegistryError, match="medicine both in domains and in exclude_domains"):
        select_domains(names, ["medicine"], ["medicine"])


@pytest.mark.parametrize(("selection", "fragment"), [
    ({"domains": []}, "selects no domain"),
    ({"domains": ["Medicine"]}, "invalid domain name 'Medicine'"),
    ({"domains": ["medicine", "medicine"]}, "a domain named twice"),
    ({"domains": ["medicine"], "exclude_domains": ["medicine"]}, "medicine: both in domains and in exclude_domains"),
])
@pytest.mark.parametrize("section", ["qa", "eval", "sft_data", "rl.stage1", "rl.stage3"])
def test_domain_selections_are_validated_in_every_section(tmp_path: Path, section: str, selection: dict,
                                                          fragment: str) -> None:
    def edit(raw: dict) -> None:
        target = raw
        for part in section.split("."):
            target = target[part]
        target.update(selection)

    with pytest.raises(ConfigError, match=fragment):
        load_params(params_copy(tmp_path, edit))


def test_unset_domain_selections_stay_out_of_the_fingerprints_and_set_ones_go_in(tmp_path: Path) -> None:
    from pipelines.config import with_overrides
    from pipelines.domains import load_registry

    params = load_params(REAL_PARAMS)
    # unset (null), the keys are not dumped: artifacts built before domain filters existed stay up to date
    assert not {"domains", "exclude_domains"} & {*params.section("qa"), *params.section("eval"),
                                                 *params.section("sft_data"), *params.rl.stage1.result_settings()}
    path = params_copy(tmp_path, lambda raw: raw["eval"].update(domains=["medicine"], exclude_domains=[]))
    held_in = load_params(path)
    assert held_in.section("eval")["domains"] == ["medicine"] and held_in.eval.exclude_domains is None
    assert held_in.eval.domains == ["medicine"]
    # the command line's --exclude-domain: an override validated as params.yaml is
    held_out = with_overrides(params, {"rl": {"stage3": {"exclude_domains": ["medicine"]}}})
    assert held_out.rl.stage3.result_settings()["exclude_domains"] == ["medicine"]
    assert held_out.rl.stage1 == params.rl.stage1 and held_out.root == params.root
    names = load_registry(params.registry_path).names
    assert "medicine" in names and held_out.selected_domains("rl.stage3") == [n for n in names if n != "medicine"]
    assert held_out.selected_domains("sft_data") == names
    with pytest.raises(ConfigError, match="command line: invalid parameters"):
        with_overrides(params, {"eval": {"domains": ["medicine"], "exclude_domains": ["medicine"]}})
    with pytest.raises(RegistryError, match=r"eval\.domains/exclude_domains: unknown domain\(s\) 'pharmacy'"):
        with_overrides(params, {"eval": {"domains": ["pharmacy"]}}).selected_domains("eval")


def test_a_newer_setting_stays_out_of_the_fingerprints_at_its_default_and_goes_in_when_set() -> None:
    from pipelines.config import NEWER_SETTING, AgentParams, SFTDataParams, with_overrides

    params = load_params(REAL_PARAMS)
    switches = {(section, name) for section in (AgentParams, SFTDataParams)
                for name, field in section.model_fields.items() if field.json_schema_extra == NEWER_SETTING}
    assert switches == {(AgentParams, "unshown_answer_note"), (SFTDataParams, "quote_relation_line"),
                        (SFTDataParams, "answer_recovery_fraction"), (SFTDataParams, "type_check"),
                        (SFTDataParams, "self_loop_share")}
    assert "unshown_answer_note" not in params.agent.result_settings() and not params.agent.unshown_answer_note
    assert "unshown_answer_note" in params.section("agent")  # dumps (omne params) still state it
    on = with_overrides(params, {"agent": {"unshown_answer_note": True},
                                 "sft_data": {"quote_relation_line": True, "answer_recovery_fraction": 0.1}})
    assert on.agent.result_settings() == {**params.agent.result_settings(), "unshown_answer_note": True}
    assert on.sft_data.result_settings() == {**params.sft_data.result_settings(), "quote_relation_line": True,
                                             "answer_recovery_fraction": 0.1}
    assert not {"quote_relation_line", "answer_recovery_fraction"} & set(params.sft_data.result_settings())


def test_the_backends_follow_the_machine_each_profile_is_for() -> None:
    """The quick profile (a CPU) generates evaluation and both RL stages' rollouts with int8 ONNX Runtime; the paper
    profile (a GPU) generates everything with the model itself, never on the CPU's ONNX."""
    quick, paper = load_params(PROJECT_ROOT / "params.yaml"), load_params(PROJECT_ROOT / "params.yaml", profile="paper")
    assert (quick.agent.backend, quick.agent.onnx_precision) == ("onnx", "int8")
    assert (quick.rl.stage1.rollout_backend(quick.agent), quick.rl.stage3.rollout_backend(quick.agent)) == \
        ("onnx", "onnx")
    assert {paper.agent.backend, paper.rl.stage1.rollout_backend(paper.agent),
            paper.rl.stage3.rollout_backend(paper.agent)} == {"transformers"}
