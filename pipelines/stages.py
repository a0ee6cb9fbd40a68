"""The stage registry: every stage of the pipeline declared once.

A stage is one library build function that writes one artifact folder. Its entry here names that function, the
stages whose artifacts it reads (the graph's edges), whether it runs once per domain, the params.yaml sections
it reads, its output folder, its report name when it writes an evaluation report, and its `omne` command. Every
entry point reads this registry:

- `omne run` (pipelines/run.py) builds the stages in registry order (a topological order of the graph);
- the Dagster assets (dagster_project/defs/) take their name, group, partitioning and deps from it;
- dvc.yaml and sweeps/dvc.yaml are generated from it (`omne stages dvc-yaml`; a test fails when they differ);
- the recorders (dagster_project/record.py, pipelines/dvc_lock.py) refuse a stage name it does not know.

Plain data, no Dagster import: the build functions are dotted references, imported when called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipelines.layout import (
    SFT_MODEL,
    correct_rollouts_file,
    index_dir,
    kg_dir,
    model_dir,
    qa_dir,
    report_dir,
    reports_dir,
    rl_model_name,
    sft_conversations_dir,
)

DOMAIN = "{domain}"  # the placeholder of a per-domain stage's domain in its paths and command
DVC_ARTIFACTS = Path("artifacts")  # the artifacts folder as dvc.yaml names it (params.yaml's paths.artifacts)
MAIN_DVC_FILE = "dvc.yaml"
SWEEPS_DVC_FILE = "sweeps/dvc.yaml"
DVC_COMMAND = "omne stages dvc-yaml"
# Dagster asset groups (the jobs select them): also what `omne run --skip-eval` / `--skip-train` leave out
KG, QA, TRAINING, EVALUATION = "kg", "qa", "training", "evaluation"
BASE_MODEL = "base"  # what the base model's evaluation evaluates (pipelines.eval.runner.BASE_REPORT_MODEL)
SFT_REPORT = "sft-tools"
RL_STAGE3_REPORT = "rl-stage3-tools"


class UnknownStageError(ValueError):
    """A stage name that the registry does not declare (a bug in the caller, not a user's input)."""


class Out(BaseModel):
    """One DVC output of a stage: a path under the artifacts folder, cached by DVC or not, and the dvc.yaml section
    it goes in (``outs``, ``metrics`` or ``plots``, with the plot's axes)."""

    model_config = ConfigDict(frozen=True)

    path: str
    cache: bool = True
    section: Literal["outs", "metrics", "plots"] = "outs"
    x: str | None = None
    y: str | None = None


class Stage(BaseModel):
    """One stage: a Dagster asset and a DVC stage of the same name (``dvc_name`` where DVC's differs), and a step
    of `omne run` (``in_run``). Paths are relative to the artifacts folder; ``{domain}`` stands for the domain."""

    model_config = ConfigDict(frozen=True)

    name: str
    build: str = Field(description="the library build function, `module:function`")
    args: tuple[Any, ...] = Field((), description="positional arguments of the build after params (an RL stage's "
                                                  "number)")
    domain_arg: Literal["name", "domain"] = Field("name", description="what a per-domain build takes first: the "
                                                                      "domain's name or its registry entry")
    label: str = Field(description="the stage's row in `omne run`'s timing table (summed over domains)")
    upstream: tuple[str, ...] = Field((), description="the stages whose artifacts the build reads")
    reads: dict[str, str] = Field({}, description="upstream stage -> the file of its artifact the build reads, "
                                                  "where it reads one file only")
    per_domain: bool = False
    domains_from: str | None = Field(None, description="params section whose domain selection (`<section>.domains` "
                                                       "/ `exclude_domains`) says which domains `omne run` builds it "
                                                       "for (default: all)")
    params: tuple[str, ...] = Field(description="the params.yaml keys that shape it (besides profile and profiles)")
    output: str = Field(description="its artifact folder under the artifacts folder")
    report: str | None = Field(None, description="the evaluation report it writes (the report's folder name)")
    evaluates: str | None = Field(None, description="a report stage's model: `base` or the upstream stage whose "
                                                    "model folder it evaluates")
    cmd: str = Field(description="the `omne` command that builds it (DVC's cmd)")
    sources: tuple[str, ...] = Field((), description="DVC deps besides upstream artifacts and code: the domain's "
                                                     "source files")
    code: tuple[str, ...] = Field((), description="library files whose change reruns the DVC stage")
    group: str = Field(description="Dagster asset group")
    process: Literal["main", "child"] = Field("child", description="where `omne run` builds it: in its own process "
                                                                   "or in a child process of its own")
    in_run: bool = Field(True, description="built by `omne run` (and so recorded by it)")
    dvc_file: str = MAIN_DVC_FILE
    dvc_name: str | None = Field(None, description="its DVC stage name where it differs from the asset's")
    wdir: str | None = None
    outs: tuple[Out, ...] = Field((), description="its DVC outs (default: the artifact folder, cached)")
    comment: str = Field("", description="one line after the stage's name in dvc.yaml")
    notes: dict[str, str] = Field({}, description="comments in dvc.yaml: dep, upstream stage or param -> text")

    @property
    def dvc_stage(self) -> str:
        return self.dvc_name or self.name

    def dvc_address(self, domain: str | None = None) -> str:
        """The stage's address in its dvc.yaml (`foreach` stages are `<name>@<domain>`)."""
        return f"{self.dvc_stage}@{domain}" if self.per_domain and domain else self.dvc_stage

    def folder(self, artifacts: Path, domain: str | None = None) -> Path:
        """The stage's artifact folder under ``artifacts`` (for ``domain`` if per domain)."""
        return artifacts / self.output.replace(DOMAIN, domain or DOMAIN)

    @property
    def function(self) -> Callable[..., Any]:
        """The build function (imported now: the registry itself imports no stage's dependencies)."""
        module, _, name = self.build.partition(":")
        return getattr(import_module(module), name)

    def dvc_outs(self) -> tuple[Out, ...]:
        return self.outs or (Out(path=self.output),)


def report_outs(name: str, *, plots: bool = True) -> tuple[Out, ...]:
    """An evaluation report's DVC outs: the predictions cached, the small files and plots kept in git's view."""
    folder = str(report_dir(Path(), name))
    outs = [Out(path=f"{folder}/report.html", cache=False), Out(path=f"{folder}/predictions.jsonl"),
            Out(path=f"{folder}/metrics.json", cache=False), Out(path=f"{folder}/manifest.json", cache=False),
            Out(path=f"{folder}/summary.json", cache=False, section="metrics")]
    if plots:
        outs.append(Out(path=f"{folder}/plots", cache=False, section="plots"))
    return tuple(outs)


def _path(folder: Path) -> str:
    return folder.as_posix()


_HERE = Path()
_AGENT_EVAL_CODE = ("pipelines/agent", "pipelines/eval")
_EVAL_PARAMS = ("agent", "eval", "tools")
_MODEL_FOLDERS = {"sft_model": model_dir(_HERE, SFT_MODEL), "stage3_rl_model": model_dir(_HERE, rl_model_name(3))}
_SFT_CODE = ("pipelines/train/sft.py", "pipelines/train/precision.py", "pipelines/train/think_loss.py")
_RL_CODE = ("pipelines/train/rl", "pipelines/train/rewards.py", "pipelines/agent")


def _evaluation(name: str, report: str, evaluates: str, label: str, upstream: tuple[str, ...],
                plots: bool = True) -> Stage:
    model = BASE_MODEL if evaluates == BASE_MODEL else _path(DVC_ARTIFACTS / _MODEL_FOLDERS[evaluates])
    return Stage(
        name=name, build="pipelines.eval.runner:evaluate_cached", label=label, upstream=upstream,
        params=_EVAL_PARAMS, output=_path(report_dir(_HERE, report)), report=report, evaluates=evaluates,
        cmd=f"omne eval --model {model} --name {report}", code=_AGENT_EVAL_CODE, group=EVALUATION,
        outs=report_outs(report, plots=plots))


def _rl(stage: int, upstream: tuple[str, ...], comment: str) -> Stage:
    return Stage(
        name=f"stage{stage}_rl_model", build="pipelines.train.rl:train_rl", args=(stage,), label=f"RL stage {stage}",
        upstream=upstream, params=(f"rl.stage{stage}", "agent", "tools"),
        output=_path(model_dir(_HERE, rl_model_name(stage))), cmd=f"omne rl --stage {stage}", code=_RL_CODE,
        group=TRAINING, comment=comment)


_STAGES: tuple[Stage, ...] = (
    Stage(name="knowledge_graph", build="pipelines.kg.domain_build:build_domain_kg", domain_arg="domain",
          label="knowledge graphs", per_domain=True, params=("seeds", "llm.model"),
          output=_path(kg_dir(_HERE, DOMAIN)), cmd=f"omne kg build --domain {DOMAIN}",
          sources=(f"kg_assets/{DOMAIN}", "${item.source.path}"),
          code=("pipelines/kg/importers.py", "pipelines/kg/lightrag_render.py", "pipelines/kg/model.py",
                "pipelines/kg/graph.py", "pipelines/kg/store.py", "pipelines/kg/extract.py"),
          group=KG, process="main",
          notes={"${item.source.path}": "a LightRAG rendering reads another domain's folder",
                 "llm.model": "text domains: the extraction model"}),
    Stage(name="entity_index", build="pipelines.kg.build:build_entity_index", label="entity indexes",
          upstream=("knowledge_graph",), per_domain=True, params=("index.encoder", "index.text", "index.ann_min_rows"),
          output=_path(index_dir(_HERE, DOMAIN)), cmd=f"omne kg index --domain {DOMAIN}",
          code=("pipelines/kg/embed.py", "pipelines/kg/index.py"), group=KG, process="main"),
    Stage(name="seed_subgraphs", build="pipelines.qa.build:build_seed_subgraphs", label="seed subgraphs",
          upstream=("knowledge_graph",), per_domain=True, domains_from="qa",
          params=("seeds", "qa.seeds_per_domain", "qa.random_seed"), output=_path(qa_dir(_HERE, "seeds", DOMAIN)),
          cmd=f"omne qa seeds --domain {DOMAIN}", code=("pipelines/qa/seeds.py",), group=QA, process="main"),
    Stage(name="qa_pairs", build="pipelines.qa.build:build_qa_pairs", label="QA pairs",
          upstream=("knowledge_graph", "seed_subgraphs"), per_domain=True, domains_from="qa", params=("qa", "llm"),
          output=_path(qa_dir(_HERE, "pairs", DOMAIN)), cmd=f"omne qa generate --domain {DOMAIN}",
          sources=(f"kg_assets/{DOMAIN}",),
          code=("pipelines/qa/generate.py", "pipelines/qa/template.py", "pipelines/text/phrases.py",
                "pipelines/text/names.py", "pipelines/qa/validate.py", "pipelines/qa/prompts.py",
                "pipelines/qa/paraphrase.py", "pipelines/qa/paths.py"),
          group=QA, process="main", notes={f"kg_assets/{DOMAIN}": "its phrases.yaml: how questions say each relation"}),
    Stage(name="gold_paths", build="pipelines.qa.build:build_gold_paths", label="gold paths",
          upstream=("knowledge_graph", "qa_pairs"), per_domain=True, domains_from="qa",
          params=("qa.gold_max_hops", "qa.gold_max_paths", "qa.gold_verify"),
          output=_path(qa_dir(_HERE, "gold", DOMAIN)), cmd=f"omne qa gold --domain {DOMAIN}",
          code=("pipelines/qa/gold.py", "pipelines/qa/paths.py"), group=QA, process="main"),
    Stage(name="qa_dataset", build="pipelines.qa.build:build_qa_dataset", label="QA dataset + checks",
          upstream=("qa_pairs", "gold_paths"),
          params=("qa.test_share", "qa.test_per_bucket", "qa.val_share", "qa.random_seed", "qa.domains",
                  "qa.exclude_domains"),
          output=_path(qa_dir(_HERE, "dataset")), cmd="omne qa build",
          code=("pipelines/qa/dataset.py", "pipelines/qa/expectations.py"), group=QA, process="main",
          notes={"qa.domains": "which domains the dataset merges (docs/evaluation.md, \"Domain filters\")"}),
    _evaluation("eval_report", "base-tools", BASE_MODEL, "evaluate base model", ("qa_dataset",)),
    _rl(1, ("qa_dataset",), "RL from the base model on QA pairs (rl.stage1: GRPO on the quick profile, PPO on paper)"),
    Stage(name="sft_conversations", build="pipelines.train.sft_data:build_sft_conversations",
          label="SFT conversations", upstream=("qa_dataset", "knowledge_graph", "stage1_rl_model"),
          reads={"stage1_rl_model": _path(correct_rollouts_file(_HERE, 1))}, params=("sft_data", "tools"),
          output=_path(sft_conversations_dir(_HERE)), cmd="omne sft data",
          code=("pipelines/train/sft_data.py", "pipelines/train/rl/keep.py", "pipelines/train/graph_names.py",
                "pipelines/qa/template.py"),
          group=TRAINING,
          notes={"knowledge_graph": "the relation descriptions the thinking reads the path with",
                 "stage1_rl_model": "RL stage 1's correct rollouts, the `agent` source (sft_data.sources): always a "
                                    "dep, as dvc.yaml is static (without that source the stage finds its "
                                    "conversations current and skips)",
                 "pipelines/train/rl/keep.py": "the kept rollouts' record"}),
    Stage(name="sft_model", build="pipelines.train.stage2:build_sft_model", label="SFT model",
          upstream=("sft_conversations",), params=("sft", "agent.base_model"),
          output=_path(model_dir(_HERE, SFT_MODEL)), cmd=f"omne sft train --name {SFT_MODEL}", code=_SFT_CODE,
          group=TRAINING),
    _evaluation("sft_eval_report", SFT_REPORT, "sft_model", "evaluate SFT model", ("qa_dataset", "sft_model")),
    _rl(3, ("qa_dataset", "sft_model"), "RL from the SFT model (rl.stage3)"),
    _evaluation("stage3_eval_report", RL_STAGE3_REPORT, "stage3_rl_model", "evaluate RL stage 3",
                ("qa_dataset", "stage3_rl_model"), plots=False),
    Stage(name="think_weight_sweep", build="pipelines.train.sweep:run_think_sweep", label="think-weight sweep",
          upstream=("sft_conversations", "sft_model", "qa_dataset"), params=("sft", "agent", "eval", "tools"),
          output=_path(reports_dir(_HERE) / "think_sweep"), cmd="omne sft sweep",
          code=(*_SFT_CODE, "pipelines/train/sweep.py"), group=TRAINING, in_run=False, dvc_file=SWEEPS_DVC_FILE,
          dvc_name="think_sweep", wdir="..",
          outs=(Out(path=_path(reports_dir(_HERE) / "think_sweep" / "sweep.png"), cache=False),
                Out(path=_path(reports_dir(_HERE) / "think_sweep" / "manifest.json"), cache=False),
                Out(path=_path(reports_dir(_HERE) / "think_sweep" / "sweep.json"), cache=False, section="plots",
                    x="think_weight", y="em")),
          comment="paper Table 5: one SFT model per think weight, each evaluated; `dvc plots show` draws EM vs weight",
          notes={"sft_model": "the point at sft.think_weight with sft.max_steps steps is this model, reused"}),
)


class Registry:
    """The stages in declaration order, which is a topological order of their graph (upstream first)."""

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        self.stages = stages
        self.by_name = {s.name: s for s in stages}
        problems = validate(stages)
        if problems:
            raise ValueError("pipelines/stages.py: " + "; ".join(problems))

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def get(self, name: str) -> Stage:
        """The stage called ``name``; an unknown name is an error that lists the known ones."""
        try:
            return self.by_name[name]
        except KeyError:
            raise UnknownStageError(f"unknown stage {name!r}: pipelines/stages.py declares "
                                    f"{', '.join(self.by_name)}") from None

    def run_stages(self) -> list[Stage]:
        """What `omne run` builds, in its order."""
        return [s for s in self.stages if s.in_run]

    def edges(self) -> set[tuple[str, str]]:
        """(upstream, stage) for every dependency."""
        return {(up, s.name) for s in self.stages for up in s.upstream}

    def downstream(self, name: str) -> list[str]:
        """``name`` and every stage that reads it, directly or not, in registry order."""
        found = {self.get(name).name}
        for stage in self.stages:
            if found & set(stage.upstream):
                found.add(stage.name)
        return [s.name for s in self.stages if s.name in found]

    def ancestors(self, name: str) -> set[str]:
        todo, seen = list(self.get(name).upstream), set()
        while todo:
            up = todo.pop()
            if up not in seen:
                seen.add(up)
                todo += self.by_name[up].upstream
        return seen

    @cached_property
    def dvc_files(self) -> list[str]:
        return list(dict.fromkeys(s.dvc_file for s in self.stages))

    def dvc_addresses(self, domains: list[str], dvc_file: str = MAIN_DVC_FILE) -> list[str]:
        """The stage addresses of one dvc.yaml, `foreach` stages expanded over ``domains``, in registry order."""
        return [s.dvc_address(d) for s in self.stages if s.dvc_file == dvc_file
                for d in (domains if s.per_domain else [None])]


def validate(stages: tuple[Stage, ...]) -> list[str]:
    """What is wrong with a list of stages: duplicate names, unknown or later upstream stages (the order must be
    topological, which also rules out cycles), reads of a stage that is not upstream, a report stage without a
    model."""
    problems, seen = [], set()
    for stage in stages:
        if stage.name in seen:
            problems.append(f"stage {stage.name!r} declared twice")
        for up in stage.upstream:
            if up not in seen:
                problems.append(f"stage {stage.name!r}: upstream {up!r} is not declared before it")
        if set(stage.reads) - set(stage.upstream):
            problems.append(f"stage {stage.name!r}: reads from a stage that is not upstream")
        if stage.report and stage.evaluates not in (BASE_MODEL, *stage.upstream):
            problems.append(f"stage {stage.name!r}: evaluates {stage.evaluates!r}, neither base nor upstream")
        seen.add(stage.name)
    return problems


STAGES = Registry(_STAGES)


def get(name: str) -> Stage:
    """The stage called ``name`` (UnknownStageError, which names the known ones, otherwise)."""
    return STAGES.get(name)


def evaluated_model(stage: Stage, artifacts: Path) -> str:
    """The model a report stage evaluates: ``base`` or the folder of the upstream stage's model."""
    if stage.evaluates is None:
        raise ValueError(f"stage {stage.name!r} writes no evaluation report")
    if stage.evaluates == BASE_MODEL:
        return BASE_MODEL
    return str(STAGES.get(stage.evaluates).folder(artifacts))


# --- dvc.yaml ------------------------------------------------------------------------------------------------------

DVC_HEADERS = {
    MAIN_DVC_FILE: """\
# DVC stages mirror the Dagster assets: same `omne` commands, same files, same params.yaml.
# Domains come from the registry; `dvc repro` builds every domain, `dvc exp run -S profile=paper`
# switches profile. Run with the project's virtualenv active (`source .venv/bin/activate`).
# Every output is `persist: true`: DVC never deletes a finished artifact before its stage runs; the
# command writes the new one into a temporary folder that replaces the old one only when complete,
# and skips the work when the artifact's manifest says it is current. `omne run` records the stages
# it built or verified in dvc.lock (`dvc commit`), so `dvc repro` after it reruns none of them.
# The think-weight sweep, which `omne run` does not build, lives in sweeps/dvc.yaml.
vars:
  - kg_assets/domains.yaml
""",
    SWEEPS_DVC_FILE: """\
# Studies that `omne run` does not build, kept out of the project's main pipeline (../dvc.yaml) so that
# `dvc repro` there does what `make run` does and nothing more. Run from the project root:
#   dvc repro sweeps/dvc.yaml        # the think-weight sweep (and whatever it needs upstream)
# Paths are relative to the project root (wdir: ..), params come from its params.yaml.
""",
}


def _dvc_path(path: str, per_domain: bool) -> str:
    return _path(DVC_ARTIFACTS / path).replace(DOMAIN, "${key}" if per_domain else DOMAIN)


def dvc_deps(stage: Stage, registry: Registry = STAGES) -> list[tuple[str, str]]:
    """(dvc.yaml dep, what it is) of a stage: the upstream artifacts it reads (a per-domain upstream's folder of
    every domain when the stage is not per domain), its sources, its code."""
    deps = []
    for name in stage.upstream:
        up = registry.get(name)
        if name in stage.reads:
            path = stage.reads[name]
        elif up.per_domain and not stage.per_domain:
            path = _path(Path(up.output).parent)
        else:
            path = up.output
        deps.append((_dvc_path(path, stage.per_domain), name))
    deps += [(source.replace(DOMAIN, "${key}"), source) for source in stage.sources]
    return deps + [(path, path) for path in stage.code]


def _entry(text: str, note: str | None) -> str:
    return f"{text}  # {note}" if note else text


def render_stage(stage: Stage, registry: Registry = STAGES) -> list[str]:
    """The stage's block of dvc.yaml."""
    lines = [_entry(f"  {stage.dvc_stage}:", stage.comment)]
    pad = "    "
    if stage.per_domain:
        lines += ["    foreach: ${domains}", "    do:"]
        pad = "      "
    if stage.wdir:
        lines.append(f"{pad}wdir: {stage.wdir}")
    lines.append(f"{pad}cmd: {stage.cmd.replace(DOMAIN, '${key}')}")
    lines.append(f"{pad}deps:")
    lines += [_entry(f"{pad}  - {dep}", stage.notes.get(key)) for dep, key in dvc_deps(stage, registry)]
    lines.append(f"{pad}params:")
    lines += [_entry(f"{pad}  - {param}", stage.notes.get(param)) for param in ("profile", "profiles", *stage.params)]
    for section in ("outs", "metrics", "plots"):
        outs = [o for o in stage.dvc_outs() if o.section == section]
        if outs:
            lines.append(f"{pad}{section}:")
        for out in outs:
            lines += [f"{pad}  - {_dvc_path(out.path, stage.per_domain)}:", f"{pad}      persist: true"]
            lines += [f"{pad}      cache: false"] * (not out.cache)
            lines += [f"{pad}      {axis}: {value}" for axis, value in (("x", out.x), ("y", out.y)) if value]
    return lines


def render_dvc_yaml(dvc_file: str = MAIN_DVC_FILE, registry: Registry = STAGES) -> str:
    """The text of ``dvc_file`` (dvc.yaml or sweeps/dvc.yaml) for the registry's stages."""
    blocks = ["\n".join(render_stage(s, registry)) for s in registry if s.dvc_file == dvc_file]
    head = (f"# generated by `{DVC_COMMAND}`; do not edit (the stages are declared in pipelines/stages.py; "
            f"`{DVC_COMMAND} --check` compares)\n" + DVC_HEADERS.get(dvc_file, ""))
    return f"{head}\nstages:\n" + "\n\n".join(blocks) + "\n"


def write_dvc_yaml(root: Path, *, check: bool = False, registry: Registry = STAGES) -> list[str]:
    """Write every dvc.yaml of the registry under ``root`` (``check``: write nothing); returns the files that
    differed from what the registry says (and were rewritten unless ``check``)."""
    changed = []
    for dvc_file in registry.dvc_files:
        path = root / dvc_file
        text = render_dvc_yaml(dvc_file, registry)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            changed.append(dvc_file)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    return changed


class BuiltArtifact(BaseModel):
    """One artifact a run built or found up to date: its stage (a name of this registry: the Dagster asset and the
    DVC stage), its domain partition, and its folder (what the recorders, dvc_lock and Dagster's, are told)."""

    stage: str
    partition: str | None = None
    folder: Path

    @property
    def dvc_stage(self) -> str:
        """The stage's address in its dvc.yaml (`foreach` stages are `<name>@<domain>`); an unknown stage name is an
        error (``UnknownStageError``)."""
        return STAGES.get(self.stage).dvc_address(self.partition)
