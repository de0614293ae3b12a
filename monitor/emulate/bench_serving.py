"""Run SGLang 0.5.23's own benchmark client (`python -m sglang.bench_serving`) here, as shipped.

The sglang wheel is installed with `--no-deps` into a directory of its own (`make venv` puts it in
`.venv/sglang-0.5.23`; `SLO_MONITOR_SGLANG_DIR` overrides), and the venv holds exactly the packages
`sglang.benchmark.serving` imports (the `bench-serving` extra). What keeps torch out is only how three
packages are imported, never the measuring code:
  - `sglang`, `sglang.srt`, `sglang.srt.utils` and `sglang.srt.disaggregation` are registered with
    their `__path__` alone, so their `__init__` (which starts the serving runtime) does not run;
    Python then imports the submodules the benchmark needs (`sglang.srt.utils.network`, whose own
    imports are psutil and pyzmq) from the wheel, unmodified;
  - `sglang.srt.disaggregation.utils` (torch at module level) is given as a module holding the one
    name the benchmark takes from it, `FAKE_BOOTSTRAP_HOST`, whose value is read from that file.
Request functions, metric calculation, goodput and the report are SGLang's own code.

It needs a Hugging Face tokenizer and no hub: `build_tokenizer` writes a word-level one (the
`tokenizers` library, saved by transformers' `PreTrainedTokenizerFast`), whose words are `w0`, `w1`,
... so a prompt of N random ids decodes to N space-separated words, which is also how the emulator
counts prompt tokens. `--dataset-name random-ids` draws random ids and downloads nothing.

    python -m monitor.emulate.bench_serving [bench_serving args...]   # same flags as bench_serving
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SGLANG_VERSION = "0.5.23"
ENV_DIR = "SLO_MONITOR_SGLANG_DIR"
# Packages whose __init__ pulls in the serving runtime: registered by path only.
PATH_ONLY = ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.disaggregation")
TORCH_MODULE = "sglang.srt.disaggregation.utils"
TORCH_MODULE_NAMES = ("FAKE_BOOTSTRAP_HOST",)
VOCAB_SIZE = 2000
SPECIALS = ("[UNK]", "[PAD]")


class BenchServingMissing(RuntimeError):
    """The sglang wheel is not where the runner looks for it."""


def sglang_dir() -> Path:
    """Where the `--no-deps` sglang wheel was installed (`.venv/sglang-0.5.23` by default)."""
    configured = os.environ.get(ENV_DIR)
    path = Path(configured) if configured else Path(sys.prefix) / f"sglang-{SGLANG_VERSION}"
    if not (path / "sglang" / "benchmark" / "serving.py").is_file():
        raise BenchServingMissing(
            f"SGLang {SGLANG_VERSION}'s bench_serving is not installed in {path} (run `make venv`, which does "
            f"`pip install --no-deps --target {path} sglang=={SGLANG_VERSION}`, or set {ENV_DIR})")
    return path


def _constants(path: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """Module-level literal assignments of `names` in a source file (read, not imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in names:
            found[target.id] = ast.literal_eval(node.value)  # type: ignore[union-attr]
    missing = set(names) - set(found)
    if missing:
        raise BenchServingMissing(f"{path}: no module-level {', '.join(sorted(missing))}")
    return found


def prepare_imports(root: Path) -> None:
    """Make `import sglang.benchmark.serving` work from the wheel without starting the runtime."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    for name in PATH_ONLY:
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root.joinpath(*name.split(".")))]
            sys.modules[name] = pkg
    if TORCH_MODULE not in sys.modules:
        source = root.joinpath(*TORCH_MODULE.split(".")).with_suffix(".py")
        mod = types.ModuleType(TORCH_MODULE)
        mod.__file__ = str(source)
        mod.__dict__.update(_constants(source, TORCH_MODULE_NAMES))
        sys.modules[TORCH_MODULE] = mod


def build_tokenizer(directory: str | Path, vocab_size: int = VOCAB_SIZE) -> Path:
    """A word-level Hugging Face tokenizer saved in `directory` (loads offline with AutoTokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(directory)
    if (out / "tokenizer.json").is_file():
        return out
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": len(SPECIALS) + i for i in range(vocab_size - len(SPECIALS))})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    fast.save_pretrained(str(out))
    return out


@dataclass(frozen=True)
class BenchResult:
    """bench_serving's JSON result line (the fields its report prints) and its console output."""

    result: dict[str, Any]
    stdout: str

    def __getitem__(self, key: str) -> Any:
        return self.result[key]

    def goodput_attainment(self, sli: str | None = None) -> float:
        """Share of requests sent that succeeded and met every SLO (or this SLO: ttft, tpot, e2el)."""
        if sli is None:
            return float(self.result["slo_attainment"])
        return float(self.result["slo_attainment_by_metric"][sli])


def command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "monitor.emulate.bench_serving", *args]


def run_process(args: list[str], output_file: str | Path, *, timeout: float = 300.0,
                env: dict[str, str] | None = None, cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run bench_serving with `args` (its own flags) in a subprocess writing `output_file`; its exit status and
    output as they are (bench_serving 0.5.23 exits with an IndexError when every request failed)."""
    sglang_dir()  # fail here, with the fix, rather than inside the subprocess
    out = Path(output_file)
    out.unlink(missing_ok=True)
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "*",
                "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.run(command([*args, "--output-file", str(out)]), capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd)


def run(args: list[str], output_file: str | Path, *, timeout: float = 300.0, env: dict[str, str] | None = None,
        cwd: str | Path | None = None) -> BenchResult:
    """Run bench_serving with `args` (its own flags) in a subprocess; returns its result line."""
    out = Path(output_file)
    proc = run_process(args, out, timeout=timeout, env=env, cwd=cwd)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"bench_serving exited with {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    lines = [ln for ln in out.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return BenchResult(json.loads(lines[-1]), proc.stdout)


def main(argv: list[str] | None = None) -> None:
    prepare_imports(sglang_dir())
    from sglang.benchmark.serving import cli_main  # type: ignore[import-not-found]

    sys.argv = ["bench_serving", *(sys.argv[1:] if argv is None else argv)]
    cli_main()


if __name__ == "__main__":
    main()
