"""The run folder (paths: :mod:`tiebias.run.layout`): ``Run`` reads it and writes it under a writer lock, and checks
that every model it hands out is the one the run trained (fingerprints, weights hash, tying on the weights)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from tiebias.config.checks import is_int
from tiebias.config.corpus import SPLITS
from tiebias.config.params import TrainConfig
from tiebias.config.presets import config_sizes
from tiebias.config.training import DEFAULT_PROFILE
from tiebias.config.variants import Variant, model_key, parse_key, step_of
from tiebias.data.checks import check_unchanged
from tiebias.data.tokens import (
    BYTE_ALPHABET_SIZE,
    SPECIAL_TOKENS,
    encode,
    load_frequencies,
    save_frequencies,
    token_frequencies,
    tokenizer_fingerprint,
    train_tokenizer,
)
from tiebias.run.files import (
    OVERWRITE_HINT,
    DamagedFileError,
    ParameterChangedError,
    RunFolderError,
    atomic_folder,
    check_model_folder,
    damaged,
    diff_config,
    read_json,
    read_log,
    sanitise_json,
    weights_sha256,
    write_json_atomic,
)
from tiebias.run.guard import check_folder, check_links, mark
from tiebias.run.layout import (
    COMPLETE_NAME,
    CONFIG_NAME,
    LENS_SUBDIR,
    LOCK_HOLDER,
    LOCK_NAME,
    TOKENIZER_FILE,
    TOKENIZER_FILES,
    WEIGHTS_NAME,
    RunLayout,
)
from tiebias.system.atomic import atomic_path
from tiebias.system.parallel import CONSTRUCTION

_DATA_KEYS = ("corpus", "vocab_size", "n_documents", "n_tokens", "tokenizer_size", "corpus_fingerprint")
FINGERPRINTS = {"corpus_fingerprint": "corpus fingerprint", "tokenizer_fingerprint": "tokenizer fingerprint"}
"""What a model folder's train_config.json records of its run's data (written when its training starts)."""
WEIGHTS_ID = "weights_sha256"  # the key of a finished model's identity in its complete.json


class RunLockedError(RunFolderError):
    """Another live process holds the run folder's writer lock."""


class ForeignModelError(RunFolderError):
    """A model folder was trained on another corpus or tokenizer than its run's (copied from another run)."""


_HELD: dict[str, int] = {}  # run folder -> PID of this process while it holds the folder's writer lock
_HASHES: dict[tuple, str] = {}  # fingerprints and weights hashes, remembered while their files are unchanged


def _corpus_name(corpus: str | Path | None) -> str:
    return "shakespeare" if corpus in (None, "", "shakespeare") else str(corpus)


def _remembered(where: Path, files: list[Path], compute: Callable[[], str]) -> str:
    """``compute()``, remembered while ``files`` keep their names, sizes, inodes and times (every model load asks)."""
    key = (str(where.resolve()), *((f.name, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                                   for f in files for st in [f.stat()]))
    if key not in _HASHES:
        _HASHES[key] = compute()
    return _HASHES[key]


def _short(fingerprint: Any) -> str:
    return f"{str(fingerprint)[:12]}..."


class Run(RunLayout):
    """A run folder: its paths (:class:`tiebias.run.layout.RunLayout`), its writer lock, creation and reading."""

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @contextlib.contextmanager
    def writing(self, what: str = "writing") -> Iterator[Run]:
        """Hold this folder's writer lock (``filelock``: a killed holder never blocks) for the block, reentrant in this
        process; a second writer gets :class:`RunLockedError` naming the holder."""
        from filelock import FileLock, Timeout

        key = str(self.path.resolve())
        if _HELD.get(key) == os.getpid():  # nested, or a thread of the holder (side by side)
            yield self
            return
        lock = FileLock(str(self.lock_path), thread_local=False)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if self.lock_path.is_symlink():
                raise RunFolderError(f"run folder {self.path}: cannot start {what}: its writer lock {self.lock_path} "
                                     f"is a symbolic link (to {os.readlink(self.lock_path)}); the kit never writes "
                                     "through a link. Remove it (rm that path; the lock is made again) and run again.")
            check_links(self.path)
            lock.acquire(blocking=False)
            write_json_atomic(self.lock_holder_path, {"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                                                      "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
        except Timeout:
            info = None
            for _ in range(20):  # the holder writes its PID just after taking the lock
                if (info := self.lock_holder()) is not None:
                    break
                time.sleep(0.05)
            held = (f"another process holds the writer lock {self.lock_path} (its PID is not recorded)" if info is None
                    else f"it is being written by PID {info['pid']} on {info['host']} since {info.get('started')} "
                    f"({info.get('what')})")
            raise RunLockedError(f"run folder {self.path}: cannot start {what}: {held}; wait for it to finish, or stop "
                                 "it (a stopped or killed process releases the lock at once), or use another run "
                                 "folder. Reading the folder is not blocked.") from None
        except OSError as e:
            lock.release()  # nothing if it was not taken
            where = f" ({e.filename})" if e.filename else ""
            raise RunFolderError(f"run folder {self.path}: cannot start {what}: it cannot be written{where}: "
                                 f"{e.strerror or e}. Make it writable again (chmod -R u+w, or chattr -R -i for an "
                                 "immutable folder; free space if the disk is full) and run the same command again: "
                                 "finished work is kept.") from None
        try:
            _HELD[key] = os.getpid()
            yield self
        finally:
            _HELD.pop(key, None)
            with contextlib.suppress(OSError):  # gone, or the folder was made read-only meanwhile
                self.lock_holder_path.unlink()
            lock.release()

    def lock_holder(self) -> dict | None:
        """Who holds the writer lock as recorded beside it; None if none, or its process on this host is dead."""
        try:
            info = json.loads(self.lock_holder_path.read_text())
            pid, host = int(info["pid"]), str(info["host"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if host == socket.gethostname():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None  # dead: the OS freed its lock
            except PermissionError:
                pass  # another user's live process
        return info

    @classmethod
    def prepare(cls, path: str | Path, *, corpus: str | Path | None = None,
                vocab_size: int = DEFAULT_PROFILE["vocab_size"], overwrite: bool = False,
                extra: dict | None = None) -> Run:
        """Create a run folder (corpus split, tokenizer, token streams, frequencies) or reopen one; everything is
        checked before the folder is touched (reopening refuses another corpus, changed corpus files or vocabulary).

        Args:
            path: the run folder. corpus: a corpus folder or dataset name (None: embedded Shakespeare).
            vocab_size: the tokenizer's size. overwrite: empty the folder first. extra: more config.json keys.

        Returns:
            The run, ready to read and write.
        """
        from tiebias.data import corpus as data  # local import: data pulls in `datasets`, slow to import

        run, corpus_name = cls(path), _corpus_name(corpus)
        minimum = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
        if not is_int(vocab_size) or vocab_size < minimum:
            raise ValueError(f"vocab_size: {vocab_size!r} is not allowed; give an integer >= {minimum} (byte-level "
                             f"BPE: 256 byte tokens + 1 special token), such as {DEFAULT_PROFILE['vocab_size']}")
        sanitise_json(extra or {})  # not serialisable: stop before anything is written
        check_folder(path, "run", corpus=corpus)  # never a user's folder or the corpus (tiebias.run.guard)
        keep: dict = {}
        have: dict = {}
        fingerprint = data.corpus_fingerprint(corpus_name)  # a hub dataset: None until it is loaded
        if run.config_path.exists() and not overwrite:
            have = run.config
            run.check_data(corpus, vocab_size)
            check_unchanged(run.path, have, fingerprint)
            if (run.tokenizer_dir / TOKENIZER_FILE).exists() and run.frequencies_path.exists() and all(
                    run.tokens_path(s).exists() for s in SPLITS):
                return run
            keep = {k: v for k, v in have.items() if k not in _DATA_KEYS}
        ds = data.load_corpus(None if corpus_name == "shakespeare" else corpus)
        if fingerprint is None:
            fingerprint = data.corpus_fingerprint(corpus_name, ds)
            check_unchanged(run.path, have, fingerprint)
        tok = train_tokenizer(ds["train"]["text"], vocab_size=vocab_size)
        if len(tok) < vocab_size:  # config.json and every summary would name a size no model has
            raise ValueError(
                f"vocab_size: {vocab_size} is more than corpus {corpus_name!r} gives: byte-level BPE found {len(tok)} "
                f"tokens ({BYTE_ALPHABET_SIZE} bytes, the special token and a merge for every pair that occurs at "
                f"least twice) and no more; give vocab_size={len(tok)} or less (--set vocab_size={len(tok)}, make "
                f"study VOCAB_SIZE={len(tok)}), or a larger corpus")
        with run.writing("preparing the run folder"):
            if overwrite and run.config_path.exists():  # empty the folder, all but its lock
                for p in run.path.iterdir():
                    if p.name not in (LOCK_NAME, LOCK_HOLDER):
                        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            mark(run.path, "run")
            with atomic_folder(run.tokenizer_dir) as tmp_tok:
                tok.save_pretrained(tmp_tok)
            run.tokens_dir.mkdir(exist_ok=True)
            n_tokens = {}
            for split in SPLITS:
                ids = encode(tok, ds[split]["text"])
                dtype = np.uint16 if len(tok) <= 65535 else np.int32
                with atomic_path(run.tokens_path(split)) as tmp, tmp.open("wb") as f:
                    np.save(f, ids.numpy().astype(dtype))
                n_tokens[split] = int(ids.numel())
            save_frequencies(run.frequencies_path, tok, token_frequencies(tok, ds["train"]["text"]))
            write_json_atomic(run.config_path, {
                **keep, "corpus": corpus_name, "vocab_size": vocab_size, "n_documents": {s: len(ds[s]) for s in SPLITS},
                "n_tokens": n_tokens, "tokenizer_size": len(tok), "corpus_fingerprint": fingerprint, **(extra or {})})
        return run

    def check_data(self, corpus: str | Path | None, vocab_size: int) -> None:
        """Refuse a ``corpus`` or ``vocab_size`` other than this folder's tokenizer and tokens were made with."""
        if not self.config_path.exists():
            return
        wanted = {"corpus": _corpus_name(corpus), "vocab_size": vocab_size}
        if diff := diff_config(self.config, wanted, list(wanted)):
            raise ParameterChangedError(
                self.path, diff, "its tokenizer and tokens were made with the folder's value", "delete that folder to "
                "make it again with these values (overwrite=true retrains models only; it never rebuilds a folder's "
                "tokenizer and tokens; from Python, Run.prepare(..., overwrite=True) empties the folder first)")

    def update_config(self, **values: Any) -> None:
        """Merge values into config.json under the writer lock (not the data keys), once their work succeeded."""
        if bad := sorted(set(values) & set(_DATA_KEYS)):
            raise ValueError(f"update_config: {bad} describe the folder's data and are set by Run.prepare only; "
                             "record study parameters under another key (e.g. study=...)")
        sanitise_json(values)  # not serialisable: stop before taking the lock or touching the file
        _ = self.config  # missing or damaged: stop before the lock creates anything
        with self.writing("updating config.json"):
            write_json_atomic(self.config_path, {**self.config, **values})

    def save_table(self, table: pd.DataFrame, name: str) -> Path:
        """Write a notebook's table to ``metrics/<name>.csv`` atomically, under the writer lock."""
        if not isinstance(name, str) or not name.strip() or any(c in name for c in "/\\") or name.startswith("."):
            raise ValueError(f"name: {name!r} is not allowed; need a plain file name such as 'lens_gap' "
                             "(no folders, not starting with '.')")
        if not isinstance(table, pd.DataFrame):
            raise ValueError(f"table: {type(table).__name__} is not a pandas DataFrame")
        path = self.table_path(name)
        with self.writing(f"saving table {name}"):
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                table.to_csv(tmp, index=False)
        return path

    @property
    def profile(self) -> str | None:
        """The profile the run's work was done with: 01's record (``study``), else 04's (``ablation``)."""
        cfg = self.config if self.config_path.exists() else {}  # its sections are JSON objects when present
        return next((str(cfg[s]["profile"]) for s in ("study", "ablation") if cfg.get(s, {}).get("profile")), None)

    @property
    def config(self) -> dict:
        """config.json as a dict; a missing or damaged file is named with what to do."""
        if not self.config_path.exists():
            raise FileNotFoundError(f"run: {self.path} has no config.json; create it with Run.prepare(...) "
                                    "or run notebooks/01_train.ipynb")
        cfg = read_json(self.config_path, "it records the corpus, vocabulary and token counts of this folder: "
                        f"restore it from a copy, or {OVERWRITE_HINT} (Run.prepare) to empty the folder and rebuild it")
        if not isinstance(cfg, dict):
            raise damaged(self.config_path, "not a JSON object", f"{OVERWRITE_HINT} to rebuild the folder")
        for section, nb in (("study", "01_train"), ("ablation", "04_ablate")):  # the notebooks' records of settings
            if section in cfg and not isinstance(cfg[section], dict):
                raise damaged(self.config_path, f"its {section!r} is a {type(cfg[section]).__name__}, not a JSON "
                              f"object of settings", f"restore it from a copy, or rerun notebook {nb}, which records it")
        return cfg

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The run's tokenizer; a missing or damaged ``tokenizer/`` is named with how to restore it."""
        d = self.tokenizer_dir
        copies = sorted(p.parent for p in self.models_dir.glob(f"*/{TOKENIZER_FILE}"))
        files = [f for f in TOKENIZER_FILES if copies and (copies[0] / f).is_file()]
        fix = f"copy the tokenizer files of {copies[0]} ({', '.join(files)}) into it, or " if copies else ""
        fix += "rerun Run.prepare (notebook 01_train), which rebuilds it from the corpus (deterministic)"
        if not (d / TOKENIZER_FILE).is_file():
            raise FileNotFoundError(f"tokenizer: {d} is missing or has no tokenizer.json; {fix}")
        try:
            return AutoTokenizer.from_pretrained(d)
        except Exception as e:  # any loader failure: reported with the folder named
            raise damaged(d, e, fix) from None

    def tokens(self, split: str) -> torch.Tensor:
        """The encoded split as a 1-D LongTensor."""
        if split not in SPLITS:
            raise ValueError(f"split: unknown value {split!r}; allowed: {', '.join(SPLITS)}")
        p = self.tokens_path(split)
        if not p.exists():
            raise FileNotFoundError(f"tokens: {p} is missing; rerun Run.prepare (notebook 01_train) to rebuild it")
        try:
            arr = np.load(p)
        except (OSError, ValueError, EOFError) as e:
            raise damaged(p, e, "delete it and rerun Run.prepare (notebook 01_train), which rebuilds it "
                          "deterministically") from None
        return torch.from_numpy(arr.astype(np.int64))

    def frequencies(self) -> np.ndarray:
        """Token counts over the training split, indexed by token id."""
        return load_frequencies(self.frequencies_path)

    def models(self) -> pd.DataFrame:
        """One row per model folder: key, variant, tied, factors, seed, complete, number of checkpoints."""
        rows = []
        for d in sorted(self.models_dir.iterdir()) if self.models_dir.exists() else []:
            try:
                v, seed = parse_key(d.name)
            except ValueError:
                continue
            rows.append((d.name, v.name, v.tied, v.input_factor, v.output_factor, seed,
                         (d / COMPLETE_NAME).exists(), len(self.checkpoints(v, seed))))  # its own marker, as spelt
        return pd.DataFrame(rows, columns=["key", "variant", "tied", "input_factor", "output_factor", "seed",
                                           "complete", "checkpoints"])

    def seeds(self, variant: str | Variant) -> list[int]:
        """Seeds with a complete model of this variant."""
        df = self.models()
        return sorted(df[(df.variant == Variant.parse(variant).name) & df.complete].seed.tolist())

    def is_complete(self, variant: str | Variant, seed: int) -> bool:
        """Whether the model finished training (its complete.json exists)."""
        return self.complete_path(variant, seed).exists()

    def summary(self, variant: str | Variant, seed: int) -> dict:
        """What training wrote when it finished this model (losses, time, throughput)."""
        p = self.complete_path(variant, seed)
        if not p.exists():
            raise FileNotFoundError(f"model {model_key(variant, seed)} in {self.path} has not finished training")
        return read_json(p, f"delete it and train {model_key(variant, seed)} again: training resumes from its "
                         "final checkpoint and rewrites this file")

    def checkpoints(self, variant: str | Variant, seed: int) -> list[tuple[int, Path]]:
        """(step, folder) of every complete checkpoint, sorted by step."""
        root = self.checkpoints_dir(variant, seed)
        return sorted((step, d) for d in (root.iterdir() if root.exists() else [])
                      if (step := step_of(d)) is not None and (d / CONFIG_NAME).exists())

    def model_path(self, variant: str | Variant, seed: int, step: int | None = None) -> Path:
        """Folder of the final model (step None) or a checkpoint, once shown to be this run's and sized as recorded."""
        if step is None:
            if not self.is_complete(variant, seed):
                raise FileNotFoundError(
                    f"model {model_key(variant, seed)} in {self.path} is missing or unfinished; "
                    f"complete models: {', '.join(self.models().query('complete').key) or 'none'}")
            found = self.model_dir(variant, seed)
        else:
            found = dict(self.checkpoints(variant, seed)).get(step)
            if found is None:
                raise ValueError(f"step: no checkpoint {step} for {model_key(variant, seed)}; available: "
                                 f"{[s for s, _ in self.checkpoints(variant, seed)]}")
        recorded = self.check_model_origin(variant, seed)
        # its config.json must have the sizes train_config.json gives, before an edited num_hidden_layers is allocated
        cfg_file, todo = self.train_config_path(variant, seed), self.repair_hint(variant, seed, step)
        vocab, run_vocab = recorded.get("vocab_size"), self.config.get("tokenizer_size")
        if vocab is not None and run_vocab is not None and vocab != run_vocab:
            raise DamagedFileError(f"{cfg_file}: vocab_size is {vocab!r}, but the run's config.json gives "
                                   f"tokenizer_size {run_vocab!r}; nothing was loaded. To fix: {todo}")
        family = recorded.get("family", TrainConfig.family)
        try:
            want = config_sizes(recorded.get("preset"), family, vocab if vocab is not None else run_vocab)
        except (ValueError, TypeError) as e:
            raise damaged(cfg_file, e, todo) from None
        saved = read_json(found / CONFIG_NAME, todo)
        for k in want:  # the sizes loading allocates
            if not isinstance(saved, dict) or saved.get(k) != want[k]:
                have = saved.get(k) if isinstance(saved, dict) else saved
                raise DamagedFileError(f"{found / CONFIG_NAME}: {k} is {have!r}, but {cfg_file} (preset "
                                       f"{recorded.get('preset')!r}, family {family!r}, vocab_size {vocab!r}) gives "
                                       f"{want[k]!r}; nothing was loaded. To fix: {todo}")
        return found

    def fingerprints(self) -> dict[str, str | None]:
        """The run's corpus and tokenizer fingerprints (sha256), as a model folder records them."""
        file = self.tokenizer_dir / TOKENIZER_FILE
        if not file.is_file():
            self.tokenizer()  # raises FileNotFoundError naming the folder and how to restore it

        try:
            tokenizer = _remembered(file, [file], lambda: tokenizer_fingerprint(file))
        except (OSError, ValueError) as e:
            raise damaged(file, e, "rerun Run.prepare (notebook 01_train) to rebuild it") from None
        corpus = self.config.get("corpus_fingerprint")
        return {"corpus_fingerprint": corpus.get("sha256") if isinstance(corpus, dict) else None,
                "tokenizer_fingerprint": tokenizer}

    def check_model_origin(self, variant: str | Variant, seed: int) -> dict:
        """Its train_config.json, once it and complete.json (weights' hash) are shown to be this model's, trained on
        this run's data (fingerprints); else :class:`ForeignModelError`."""
        v, key = Variant.parse(variant), model_key(variant, seed)
        mdir, by = self.model_dir(v, seed), "01_train" if v.name in ("tied", "untied") else "04_ablate"
        todo = (f"retrain {key} in this run (delete {mdir} and run {by} again, or run {by} with overwrite: "
                f"{OVERWRITE_HINT}), or use it with the run it came from")
        cfg_file = self.train_config_path(v, seed)
        recorded = read_json(cfg_file, f"restore it, or {todo}") if cfg_file.exists() else {}
        recorded = recorded if isinstance(recorded, dict) else {}
        checks = [(cfg_file, recorded, {"variant": v.name, "seed": seed})]
        held = WEIGHTS_NAME if (mdir / WEIGHTS_NAME).exists() else "the sharded weights"
        if self.is_complete(v, seed):
            check_model_folder(mdir, self.repair_hint(v, seed))  # a damaged file is named as such, not as another model
            checks.insert(0, (self.complete_path(v, seed), self.summary(v, seed), {
                "key": key, "variant": v.name, "seed": seed, WEIGHTS_ID: self.model_id(v, seed)}))
        for file, record, want in checks:
            record = record if isinstance(record, dict) else {}
            if wrong := [f"its {k} is {_short(record[k])}, but the weights in the folder ({held}) hash to "
                         f"{_short(value)}" if k == WEIGHTS_ID else f"its {k} is {record[k]!r}, not {value!r}"
                         for k, value in want.items() if record.get(k) is not None and record[k] != value]:
                raise ForeignModelError(f"{file} does not describe the model in {mdir}: {'; '.join(wrong)} (a folder "
                                        f"copied from another model's, or its weights replaced). To fix: {todo}")
        mine = self.fingerprints()
        if all(recorded.get(k) is None for k in FINGERPRINTS):
            raise ForeignModelError(f"model folder {mdir} records no corpus or tokenizer fingerprint (trained by an "
                                    "earlier version, which this one does not read), so whether it was trained on "
                                    f"this run's data cannot be told. To fix: {todo}")
        if differs := [f"its {label} {_short(recorded[k])} is not this run's ({_short(mine[k])})"
                       for k, label in FINGERPRINTS.items()
                       if recorded.get(k) is not None and mine[k] is not None and recorded[k] != mine[k]]:
            raise ForeignModelError(f"model folder {mdir} was trained on other data than run {self.path}: "
                                    f"{'; '.join(differs)}. To fix: {todo}")
        return recorded

    def model_id(self, variant: str | Variant, seed: int) -> str | None:
        """The sha256 of a finished model's weights now (records from other weights are stale); None if unfinished."""
        if not self.is_complete(variant, seed):
            return None
        mdir, todo = self.model_dir(variant, seed), f"retrain {model_key(variant, seed)} ({OVERWRITE_HINT})"
        return _remembered(mdir, sorted(mdir.glob("model*.safetensors*")), lambda: weights_sha256(mdir, todo))

    def lens_dir(self, variant: str | Variant, seed: int, step: int | None = None) -> Path:
        """``models/<key>/lens/``, or ``<checkpoint>/lens/`` of an existing checkpoint."""
        root = self.model_dir(variant, seed) if step is None else self.model_path(variant, seed, step)
        return root / LENS_SUBDIR

    def repair_hint(self, variant: str | Variant, seed: int, step: int | None = None) -> str:
        """What to do about a final model (step None) or a checkpoint whose files are damaged."""
        key = model_key(variant, seed)
        if step is None:
            return (f"delete {self.complete_path(variant, seed)} and train {key} again: training resumes from "
                    "the newest good checkpoint and rewrites the final model")
        others = [s for s, _ in self.checkpoints(variant, seed) if s != step]
        return f"use another step (available: {others}), or retrain {key} ({OVERWRITE_HINT})"

    def not_its_model(self, variant: str | Variant, seed: int, step: int | None, why: str) -> RunFolderError:
        """The error for a model folder not tied as its variant says."""
        v = Variant.parse(variant)
        return RunFolderError(f"{self.model_path(v, seed, step)}: the run's variant {v.name!r} is "
                              f"{'tied' if v.tied else 'untied'}, and {why}: it is not the model the run trained; "
                              f"{self.repair_hint(v, seed, step)}")

    def load_model(self, variant: str | Variant, seed: int, step: int | None = None,
                   device: str | torch.device = "cpu") -> PreTrainedModel:
        """A trained model (or checkpoint) in eval mode; damaged files, and weights not tied as the variant says
        (checked on the loaded matrices), are refused."""
        from transformers import AutoModelForCausalLM

        path, todo = self.model_path(variant, seed, step), self.repair_hint(variant, seed, step)
        check_model_folder(path, todo)
        try:
            with CONSTRUCTION:  # loading patches torch.nn.init process-wide: one load at a time
                m, loading = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
        except Exception as e:  # any loader failure: reported with the folder named
            raise damaged(path, e, todo) from None
        v, config_tied = Variant.parse(variant), getattr(m.config, "tie_word_embeddings", None)
        a, b = m.get_input_embeddings().weight, m.get_output_embeddings().weight
        tied = a.data_ptr() == b.data_ptr() or (a.shape == b.shape and torch.equal(a, b))
        if tied != v.tied or config_tied != v.tied:
            raise self.not_its_model(v, seed, step, "the model in this folder does not match it (its config.json says "
                                     f"tie_word_embeddings={config_tied!r}, and its loaded input and output embeddings "
                                     f"are {'one matrix' if tied else 'two different matrices'})")
        if loading.get("missing_keys"):
            raise damaged(path, f"its weights lack {sorted(loading['missing_keys'])}, which loading would draw at "
                          "random", todo)
        return m.to(device).eval()

    def metrics(self, variant: str | Variant, seed: int, kind: str = "train") -> pd.DataFrame:
        """Per-step training metrics (``kind='train'``) or validation losses (``'val'``), read as untrusted."""
        p, key = self.metrics_path(variant, seed, kind), model_key(variant, seed)
        if not p.exists():
            raise FileNotFoundError(f"no {kind} metrics for {key} in {self.path}")
        return read_log(p, todo=f"remove the bad lines, or retrain {key} ({OVERWRITE_HINT})")
