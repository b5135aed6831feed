"""Where everything lives in a run folder: one path per file or folder, no reading or writing.

Layout::

    runs/<name>/
        config.json                 corpus, vocabulary size and the study parameters
        tokenizer/                  transformers fast tokenizer (save_pretrained)
        token_frequencies.csv       id, token, count over the training split
        tokens/{train,validation,test}.npy   the encoded splits (token id streams)
        models/<variant>-s<seed>/   final HF model (+ tokenizer files), train_config.json, complete.json
            checkpoints/step-<N>/   HF model at step N (step 0 = initialisation)
            lens/                   tuned lens for this model (also checkpoints/step-<N>/lens/)
        metrics/<variant>-s<seed>.csv       one row per optimiser step
        metrics/<variant>-s<seed>_val.csv   validation loss at evaluation steps
        metrics/<table>.csv         tables the notebooks save
        results/<claim>.json        one recorded claim each
        depth/<preset>/             a run of another depth sharing this run's data (notebook 03)
        figures/  notebooks/  report/  summary.json  report.html
        notebook_times.json         the notebooks' times as JupyterLab kernels ran them (tiebias.run.kernel_times)
        .lock  .lock-holder.json    the writer lock and who holds it (tiebias.run.folder.Run.writing)
        .tiebias-run.json           marks a run folder (an external pair's: .tiebias-pair.json; tiebias.run.guard)
        .tiebias-study.json         the study commands run on the folder (the reproduction report's rerun)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiebias.config.variants import Variant, model_key

LOCK_NAME = ".lock"
LOCK_HOLDER = ".lock-holder.json"
LENS_SUBDIR = "lens"  # a model's (or checkpoint's) lens folder
CHECKPOINTS_SUBDIR = "checkpoints"
COMPLETE_NAME = "complete.json"  # a finished model's marker
MARKERS = {"run": ".tiebias-run.json", "pair": ".tiebias-pair.json"}  # written when the kit creates the folder
CONFIG_NAME = "config.json"  # a run's config; also a saved model's (HF) config and a lens's (tuned_lens) config
TRAIN_CONFIG_NAME = "train_config.json"  # what a model is (being) trained with
WEIGHTS_NAME = "model.safetensors"  # a saved model's weights in one file ...
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"  # ... or the index of its shards
TRAINER_STATE_NAME = "trainer_state.pt"  # optimiser state saved with a checkpoint's weights
TOKENIZER_SUBDIR = "tokenizer"
TOKENIZER_FILE = "tokenizer.json"  # the file of a saved fast tokenizer
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json")  # what save_pretrained writes (transformers 5)
LENS_PARAMS_NAME = "params.pt"  # a lens's translators (tuned_lens format, next to its config.json)
LENS_SIDECAR_NAME = "tiebias_lens.json"  # a lens's unembedding hash and shapes, written by the kit


def _at(*parts: str) -> Any:
    """A read-only path attribute: the run folder joined with ``parts``."""
    return property(lambda self: self.path.joinpath(*parts))


class RunLayout:
    """The paths of a run folder (see the module docstring); :class:`tiebias.run.folder.Run` adds the I/O."""

    config_path = _at(CONFIG_NAME)
    tokenizer_dir = _at(TOKENIZER_SUBDIR)
    tokens_dir = _at("tokens")
    frequencies_path = _at("token_frequencies.csv")
    study_commands_path = _at(".tiebias-study.json")  # the study commands run on this folder, in order
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
        """The file that marks a folder of the kit: ``kind`` 'run' or 'pair'."""
        if kind not in MARKERS:
            raise ValueError(f"kind: unknown value {kind!r}; allowed: {', '.join(MARKERS)}")
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
        """``metrics/<key>.csv`` (``kind='train'``) or ``metrics/<key>_val.csv`` (``kind='val'``)."""
        if kind not in ("train", "val"):
            raise ValueError(f"kind: unknown value {kind!r}; allowed: 'train', 'val'")
        return self.metrics_dir / f"{model_key(variant, seed)}{'' if kind == 'train' else '_val'}.csv"

    def table_path(self, name: str) -> Path:
        return self.metrics_dir / f"{name}.csv"

    def result_path(self, claim: str) -> Path:
        return self.results_dir / f"{claim}.json"

    @property
    def figures_dir(self) -> Path:
        """``figures/``, created if missing (figures are written into it)."""
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def figure_path(self, name: str, ext: str = "html") -> Path:
        """``figures/<name>.<ext>``; creates nothing."""
        return self.path / "figures" / f"{name}.{ext}"

    def pair_lens_dir(self, label: str) -> Path:
        """``lens/<label>/``: a lens ladder of one model of an external pair (its folder is not a run's)."""
        return self.path / LENS_SUBDIR / label

    def depth_dir(self, preset: str) -> Path:
        """``depth/<preset>/``: the run folder of another model depth sharing this run's data."""
        return self.path / "depth" / preset
