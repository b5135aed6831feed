"""Where everything lives in a run folder: one path per file or folder, no reading or writing::

    config.json  tokenizer/  token_frequencies.csv  tokens/{train,validation,test}.npy
    models/<variant>-s<seed>/   HF model, train_config.json, complete.json, checkpoints/step-<N>/, lens/
    metrics/<key>.csv, <key>_val.csv (per step), <table>.csv   results/<claim>.json   depth/<preset>/
    figures/  notebooks/  report/  summary.json  report.html  notebook_times.json (kernels' times)
    .lock .lock-holder.json (writer lock)  .tiebias-run.json / .tiebias-pair.json (marker)  .tiebias-study.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiebias.config.variants import Variant, model_key

LOCK_NAME, LOCK_HOLDER = ".lock", ".lock-holder.json"
LENS_SUBDIR, CHECKPOINTS_SUBDIR = "lens", "checkpoints"
COMPLETE_NAME = "complete.json"  # a finished model's marker
MARKERS = {"run": ".tiebias-run.json", "pair": ".tiebias-pair.json"}  # written when the kit creates the folder
CONFIG_NAME = "config.json"  # a run's config; also a saved model's (HF) and a lens's (tuned_lens)
TRAIN_CONFIG_NAME = "train_config.json"
WEIGHTS_NAME, WEIGHTS_INDEX_NAME = "model.safetensors", "model.safetensors.index.json"  # one file, or shards' index
TRAINER_STATE_NAME = "trainer_state.pt"  # optimiser state saved with a checkpoint
TOKENIZER_SUBDIR, TOKENIZER_FILE = "tokenizer", "tokenizer.json"
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json")  # what save_pretrained writes (transformers 5)
LENS_PARAMS_NAME, LENS_SIDECAR_NAME = "params.pt", "tiebias_lens.json"  # tuned_lens translators; the kit's sidecar


def _at(*parts: str) -> Any:
    return property(lambda self: self.path.joinpath(*parts))


class RunLayout:
    """The paths of a run folder; :class:`tiebias.run.folder.Run` adds the I/O."""

    config_path = _at(CONFIG_NAME)
    tokenizer_dir = _at(TOKENIZER_SUBDIR)
    tokens_dir = _at("tokens")
    frequencies_path = _at("token_frequencies.csv")
    study_commands_path = _at(".tiebias-study.json")
    lock_path = _at(LOCK_NAME)
    lock_holder_path = _at(LOCK_HOLDER)
    models_dir = _at("models")
    metrics_dir = _at("metrics")
    results_dir = _at("results")
    notebooks_dir = _at("notebooks")
    report_dir = _at("report")
    report_path = _at("report.html")
    kernel_times_path = _at("notebook_times.json")
    summary_path = _at("summary.json")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def tokens_path(self, split: str) -> Path:
        return self.tokens_dir / f"{split}.npy"

    def marker_path(self, kind: str = "run") -> Path:
        return self.path / MARKERS[kind]

    def model_dir(self, variant: str | Variant, seed: int) -> Path:
        return self.models_dir / model_key(variant, seed)

    def train_config_path(self, variant: str | Variant, seed: int) -> Path:
        return self.model_dir(variant, seed) / TRAIN_CONFIG_NAME

    def complete_path(self, variant: str | Variant, seed: int) -> Path:
        return self.model_dir(variant, seed) / COMPLETE_NAME

    def checkpoints_dir(self, variant: str | Variant, seed: int) -> Path:
        return self.model_dir(variant, seed) / CHECKPOINTS_SUBDIR

    def metrics_path(self, variant: str | Variant, seed: int, kind: str = "train") -> Path:
        if kind not in ("train", "val"):
            raise ValueError(f"kind: unknown value {kind!r}; allowed: 'train', 'val'")
        return self.metrics_dir / f"{model_key(variant, seed)}{'' if kind == 'train' else '_val'}.csv"

    def table_path(self, name: str) -> Path:
        return self.metrics_dir / f"{name}.csv"

    def result_path(self, claim: str) -> Path:
        return self.results_dir / f"{claim}.json"

    @property
    def figures_dir(self) -> Path:  # created if missing
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def figure_path(self, name: str, ext: str = "html") -> Path:
        return self.path / "figures" / f"{name}.{ext}"

    def pair_lens_dir(self, label: str) -> Path:  # the lens ladder of one model of an external pair
        return self.path / LENS_SUBDIR / label

    def depth_dir(self, preset: str) -> Path:  # a run of another model depth sharing this run's data
        return self.path / "depth" / preset
