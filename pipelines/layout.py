"""Where every artifact lives under the artifacts folder (params ``paths.artifacts``): the one place that
spells the folder names. dvc.yaml's ``outs`` and the docs (docs/architecture.md, "Artifacts") name the
same folders."""

from __future__ import annotations

from pathlib import Path

SFT_MODEL = "sft"  # the stage-2 model's folder name under models/
CONVERSATIONS_FILE = "conversations.jsonl"
CORRECT_ROLLOUTS_FILE = "correct_rollouts.jsonl"  # an RL stage's exactly-correct training rollouts, in its model folder
RUN_TIMINGS_FILE = "run_timings.json"


def kg_dir(artifacts: Path, domain: str) -> Path:
    """A domain's knowledge graph (entities/relations parquet)."""
    return artifacts / "kg" / domain


def index_dir(artifacts: Path, domain: str) -> Path:
    """A domain's entity index (LanceDB table of entity embeddings)."""
    return artifacts / "index" / domain


def lightrag_dir(artifacts: Path, domain: str) -> Path:
    """A domain's graph loaded into the lightrag-hku library (its working dir), for the LightRAG baseline."""
    return artifacts / "lightrag" / domain


def qa_dir(artifacts: Path, kind: str, domain: str | None = None) -> Path:
    """qa/{seeds,pairs,gold}/<domain>/ and qa/dataset/."""
    return artifacts / "qa" / kind / domain if domain else artifacts / "qa" / kind


def sft_conversations_dir(artifacts: Path) -> Path:
    """The stage-2 SFT conversations (ShareGPT jsonl)."""
    return artifacts / "sft" / "conversations"


def model_dir(artifacts: Path, name: str) -> Path:
    """A model folder: the converted base model, ``sft``, ``rl-stage1``/``rl-stage3``, or a named one."""
    return artifacts / "models" / name


def onnx_model_dir(artifacts: Path, identity: str, precision: str) -> Path:
    """A model converted for the ONNX Runtime generation backend, by the source model's identity
    (``manifest.model_identity``) and the precision of the conversion."""
    return artifacts / "models" / "onnx" / f"{identity}-{precision}"


def rl_model_name(stage: int) -> str:
    return f"rl-stage{stage}"


def correct_rollouts_file(artifacts: Path, stage: int = 1) -> Path:
    """An RL stage's exactly-correct training rollouts (stage 1's are the ``agent`` source of the SFT data)."""
    return model_dir(artifacts, rl_model_name(stage)) / CORRECT_ROLLOUTS_FILE


def reports_dir(artifacts: Path) -> Path:
    """Evaluation reports (one folder each), the think-weight sweep and run_timings.json."""
    return artifacts / "reports"


def report_dir(artifacts: Path, name: str) -> Path:
    return reports_dir(artifacts) / name


def kgqa_workspace(artifacts: Path) -> Path:
    """External KGQA sets: their own domains.yaml, kg/ and index/ (kept apart from the project's domains)."""
    return artifacts / "kgqa"


def embeddings_cache_dir(artifacts: Path) -> Path:
    """Sentence embeddings by text hash, shared by every entity index."""
    return artifacts / "cache" / "embeddings"


def llm_cache_dir(artifacts: Path) -> Path:
    """Replies of the LLM endpoint by request hash (a rerun costs no tokens)."""
    return artifacts / "cache" / "llm"


def lock_file(artifacts: Path, name: str) -> Path:
    """A lock across processes: one domain's import or build, the QA dataset, one model's ONNX conversion."""
    return artifacts / ".locks" / f"{name}.lock"
