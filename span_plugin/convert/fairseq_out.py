"""Writing a converted model folder: ``model.pt`` (a fairseq checkpoint of plain
containers and tensors, loadable with ``torch.load(weights_only=True)``), ``dict.txt``
and the tokenizer files copied from the source.

Every check runs before this module is called; each file is written atomically, and
``model.pt`` last, so its presence means the folder is complete.
"""

import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from span_plugin.convert.hf_source import ConversionError
from span_plugin.files.atomic import atomic_copy, atomic_write, commit
from span_plugin.files.stops import named

logger = logging.getLogger(__name__)


def build_checkpoint(state_dict: Dict[str, torch.Tensor], model_cfg: Dict, data_dir,
                     bpe: Dict) -> Dict:
    """A fairseq checkpoint dict of plain containers and tensors only.

    ``bpe`` is ``cfg.bpe``: fairseq's own BPE over the folder's tokenizer files, so that
    fairseq's ``RobertaModel.from_pretrained(folder, "model.pt", folder)`` encodes text
    too (after moving the folder, pass the files' new paths).

    ``optimizer_history`` holds one empty entry rather than none: fairseq's
    ``_upgrade_state_dict`` indexes ``optimizer_history[-1]``. With
    ``last_optimizer_state`` None, no optimizer state is ever restored from it.
    """
    return {
        "cfg": {
            "_name": None,
            "model": model_cfg,
            # What load_model_ensemble_and_task needs to build the model: the dictionary
            # folder (override with arg_overrides={"data": ...} after moving the folder).
            "task": {
                "_name": "masked_lm",
                "data": str(data_dir),
                "tokens_per_sample": model_cfg["max_positions"],
            },
            "criterion": {"_name": "masked_lm"},
            "bpe": bpe,
        },
        "model": state_dict,
        "optimizer_history": [{
            "criterion_name": "MaskedLmLoss",
            "optimizer_name": "none",
            "lr_scheduler_state": {"best": None},
            "num_updates": 0,
        }],
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        "last_optimizer_state": None,
    }


def write_dict_txt(tokens: Sequence[str], path) -> None:
    """fairseq ``dict.txt`` (``token count`` lines); counts are all 1, order is kept."""
    atomic_write(path, lambda f: f.write("".join(f"{t} 1\n" for t in tokens).encode("utf-8")))


def check_out_dir(out_dir, overwrite: bool) -> Path:
    """``out_dir`` as a Path, refused when it is a file or already holds a model.pt
    (unless ``overwrite``)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"{out_dir}: exists and is not a folder")
    if (out_dir / "model.pt").exists() and not overwrite:
        raise ConversionError(f"{out_dir / 'model.pt'}: exists (pass overwrite / --force)")
    return out_dir


def write_model_folder(out_dir, dict_tokens: Sequence[str],
                       copies: Sequence[Tuple[Optional[Path], str]], written: Dict[str, bytes],
                       checkpoint: Callable[[Path], Dict]) -> None:
    """Write ``out_dir``: ``dict.txt``; each ``(source file, name)`` of ``copies`` copied
    (a name whose source is None or missing is removed, so an overwritten folder keeps no
    file of an earlier conversion); each ``name -> bytes`` of ``written``; ``model.pt``
    last, ``checkpoint(out_dir)`` saved with torch.save."""
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Every file is written into a folder of its own inside out_dir first, then moved
    # into place (model.pt last): a fault or a signal on the way leaves out_dir as it
    # was (an earlier conversion whole), or no folder at all when this call made it.
    stage = out_dir / f".partial-{os.getpid()}"
    try:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        write_dict_txt(dict_tokens, stage / "dict.txt")
        gone = []
        for src, dst in copies:
            if src is not None and src.is_file():
                atomic_copy(src, stage / dst)
            else:  # left by an earlier conversion (overwrite) is removed
                gone.append(dst)
        for name, data in written.items():
            atomic_write(stage / name, lambda f, data=data: f.write(data))
        atomic_write(stage / "model.pt", lambda f: torch.save(checkpoint(out_dir), f))
        if (out_dir / "model.pt").exists():  # the old folder is incomplete from here on
            os.remove(out_dir / "model.pt")
        for name in gone:
            if (out_dir / name).exists():
                (out_dir / name).unlink()
        for path in sorted(stage.iterdir(), key=lambda p: p.name == "model.pt"):
            commit(path, out_dir / path.name)
    except BaseException as err:
        shutil.rmtree(stage, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        if named(err, out_dir) is not err:
            raise named(err, out_dir) from err
        raise
    stage.rmdir()
    logger.info("wrote %s", out_dir / "model.pt")
