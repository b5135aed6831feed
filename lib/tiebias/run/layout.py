"""Where everything lives in a run folder: one path method per file or folder, no reading or writing.

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
        .lock  .lock-holder.json    the writer lock and who holds it (see :meth:`tiebias.run.folder.Run.writing`)
        .tiebias-run.json           marks a run folder (an external pair's: .tiebias-pair.json); see
                                    :mod:`tiebias.run.guard`
        .tiebias-study.json         the study commands run on the folder (the reproduction report's rerun)

:class:`RunLayout` is the base of :class:`tiebias.run.folder.Run`; code outside this module asks a Run for a
path instead of joining names to ``run.path``.
"""

from __future__ import annotations

from pathlib import Path

from tiebias.config.variants import Variant, model_key, step_dir

LOCK_NAME = ".lock"
LOCK_HOLDER = ".lock-holder.json"
LENS_SUBDIR = "lens"  # a model's (or checkpoint's) lens folder
CHECKPOINTS_SUBDIR = "checkpoints"  # a model's checkpoint folders
COMPLETE_NAME = "complete.json"  # a finished model's marker
MARKERS = {"run": ".tiebias-run.json", "pair": ".tiebias-pair.json"}  # written when the kit creates the folder
STUDY_COMMANDS = ".tiebias-study.json"  # the study commands run on the folder, in order (the report's rerun command)
METRIC_KINDS = ("train", "val")
CONFIG_NAME = "config.json"  # a run's config; also a saved model's (HF) config and a lens's (tuned_lens) config
TRAIN_CONFIG_NAME = "train_config.json"  # what a model is (being) trained with
WEIGHTS_NAME = "model.safetensors"  # a saved model's weights in one file ...
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"  # ... or the index of its shards
TRAINER_STATE_NAME = "trainer_state.pt"  # optimiser state saved with a checkpoint's weights
TOKENIZER_SUBDIR = "tokenizer"  # the folder of a run's tokenizer
TOKENIZER_FILE = "tokenizer.json"  # the file of a saved fast tokenizer
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json")  # what save_pretrained writes (transformers 5)
LENS_PARAMS_NAME = "params.pt"  # a lens's translators (tuned_lens format, next to its config.json)
LENS_SIDECAR_NAME = "tiebias_lens.json"  # a lens's unembedding hash and shapes, written by the kit


class RunLayout:
    """The paths of a run folder (see the module docstring); :class:`tiebias.run.folder.Run` adds the I/O."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # -- the folder's data ----------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        """``config.json``: corpus, vocabulary, token counts and recorded study parameters."""
        return self.path / CONFIG_NAME

    @property
    def tokenizer_dir(self) -> Path:
        """``tokenizer/``: the run's fast tokenizer."""
        return self.path / TOKENIZER_SUBDIR

    @property
    def tokens_dir(self) -> Path:
        """``tokens/``: the encoded splits."""
        return self.path / "tokens"

    def tokens_path(self, split: str) -> Path:
        """``tokens/<split>.npy``: one encoded split (the split is not checked here)."""
        return self.tokens_dir / f"{split}.npy"

    @property
    def frequencies_path(self) -> Path:
        """``token_frequencies.csv``: token counts over the training split."""
        return self.path / "token_frequencies.csv"

    def marker_path(self, kind: str = "run") -> Path:
        """``.tiebias-run.json`` (``kind='run'``) or ``.tiebias-pair.json`` (``'pair'``): marks a folder of the kit."""
        if kind not in MARKERS:
            raise ValueError(f"kind: unknown value {kind!r}; allowed: {', '.join(MARKERS)}")
        return self.path / MARKERS[kind]

    @property
    def study_commands_path(self) -> Path:
        """``.tiebias-study.json``: the ``python -m tiebias study`` commands run on this folder, in order."""
        return self.path / STUDY_COMMANDS

    @property
    def lock_path(self) -> Path:
        """``.lock``: the writer lock file."""
        return self.path / LOCK_NAME

    @property
    def lock_holder_path(self) -> Path:
        """``.lock-holder.json``: who holds the writer lock."""
        return self.path / LOCK_HOLDER

    # -- models -----------------------------------------------------------------------------------
    @property
    def models_dir(self) -> Path:
        """``models/``: one folder per trained model."""
        return self.path / "models"

    def model_dir(self, variant: str | Variant, seed: int) -> Path:
        """``models/<variant>-s<seed>/``: the final model and its training records."""
        return self.models_dir / model_key(variant, seed)

    def train_config_path(self, variant: str | Variant, seed: int) -> Path:
        """``models/<key>/train_config.json``: what the model is (being) trained with."""
        return self.model_dir(variant, seed) / TRAIN_CONFIG_NAME

    def complete_path(self, variant: str | Variant, seed: int) -> Path:
        """``models/<key>/complete.json``: the completion marker and training summary."""
        return self.model_dir(variant, seed) / COMPLETE_NAME

    def checkpoints_dir(self, variant: str | Variant, seed: int) -> Path:
        """``models/<key>/checkpoints/``: the model's checkpoint folders."""
        return self.model_dir(variant, seed) / CHECKPOINTS_SUBDIR

    def checkpoint_dir(self, variant: str | Variant, seed: int, step: int) -> Path:
        """``models/<key>/checkpoints/step-<N>/`` (whether it exists or not)."""
        return self.checkpoints_dir(variant, seed) / step_dir(step)

    # -- metrics ----------------------------------------------------------------------------------
    @property
    def metrics_dir(self) -> Path:
        """``metrics/``: training logs and the notebooks' tables."""
        return self.path / "metrics"

    def metrics_path(self, variant: str | Variant, seed: int, kind: str = "train") -> Path:
        """``metrics/<key>.csv`` (``kind='train'``) or ``metrics/<key>_val.csv`` (``kind='val'``)."""
        if kind not in METRIC_KINDS:
            raise ValueError(f"kind: unknown value {kind!r}; allowed: 'train', 'val'")
        suffix = "" if kind == "train" else "_val"
        return self.metrics_dir / f"{model_key(variant, seed)}{suffix}.csv"

    def table_path(self, name: str) -> Path:
        """``metrics/<name>.csv``: a table a notebook saves (e.g. ``ablation_alignment``)."""
        return self.metrics_dir / f"{name}.csv"

    # -- results and the report -------------------------------------------------------------------
    @property
    def results_dir(self) -> Path:
        """``results/``: one JSON file per recorded claim."""
        return self.path / "results"

    def result_path(self, claim: str) -> Path:
        """``results/<claim>.json`` (the claim is not checked here)."""
        return self.results_dir / f"{claim}.json"

    @property
    def notebooks_dir(self) -> Path:
        """``notebooks/``: the executed notebooks of a study."""
        return self.path / "notebooks"

    @property
    def figures_dir(self) -> Path:
        """``figures/``, created if missing (figures are written into it)."""
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def figure_path(self, name: str, ext: str = "html") -> Path:
        """``figures/<name>.<ext>``; unlike :attr:`figures_dir`, creates nothing."""
        return self.path / "figures" / f"{name}.{ext}"

    @property
    def report_dir(self) -> Path:
        """``report/``: the notebooks as HTML pages."""
        return self.path / "report"

    @property
    def report_path(self) -> Path:
        """``report.html``: the index page of the report."""
        return self.path / "report.html"

    @property
    def kernel_times_path(self) -> Path:
        """``notebook_times.json``: how long each notebook's cells ran in a JupyterLab kernel."""
        return self.path / "notebook_times.json"

    @property
    def summary_path(self) -> Path:
        """``summary.json``: the headline numbers of the study."""
        return self.path / "summary.json"

    def pair_lens_dir(self, label: str) -> Path:
        """``lens/<label>/``: a lens ladder of one model of an external pair (its folder is not a run's)."""
        return self.path / LENS_SUBDIR / label

    def depth_dir(self, preset: str) -> Path:
        """``depth/<preset>/``: the run folder of another model depth sharing this run's data."""
        return self.path / "depth" / preset
