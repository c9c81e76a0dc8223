"""Every global outside the allow-list is "unsafe", whatever it names and however the
file was written: ``os.system`` (a module torch's reader blocks, which it reports
otherwise than ``eval``), ``subprocess.Popen``, a pickle of protocol 4 (``STACK_GLOBAL``)
or 0 (``INST``), torch's zip format and its legacy one; through the library's loader,
fairseq's, the hub, ``span-convert flags`` and ``resume``, which moves nothing and
resumes from nothing while such a file is in the folder."""

import io
import os
import pickle
import shutil
import subprocess
import zipfile

import pytest
import torch

from conftest import ROOT

from span_plugin.convert.safe_load import UnsafeCheckpointError, load_checkpoint

REAL = ROOT / "tests" / "fixtures" / "checkpoint_v0_2" / "span_classification.pt"


class Call:
    """Unpickling calls ``function(*args)``."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return (self.function, self.args)


def payloads(marker):
    """{name: (the object planted, the global the refusal names)}; each creates
    ``marker`` if it runs."""
    return {"os.system": (Call(os.system, f"touch {marker}"), "posix.system"),
            "eval": (Call(eval, f"open({str(marker)!r}, 'w')"), "builtins.eval"),
            "subprocess.Popen": (Call(subprocess.Popen, ["touch", str(marker)]),
                                 "subprocess.Popen")}


def write(path, payload, form):
    """The real checkpoint with ``payload`` in its extra_state, saved in ``form``: torch's
    zip format, its legacy one, or zip whose data.pkl is pickled by Python with
    protocol 4 (STACK_GLOBAL) or 0 (INST, GLOBAL as text), tensors left out."""
    state = load_checkpoint(REAL)
    state["extra_state"]["planted"] = payload
    torch.save(state, path, _use_new_zipfile_serialization=form != "legacy")
    if form.startswith("protocol"):  # Python's pickle would not write tensors as torch does
        pickled = pickle.dumps({"model": {}, "extra_state": {"planted": payload}},
                               protocol=int(form[-1]))
        buffer = io.BytesIO()
        with zipfile.ZipFile(path) as old, zipfile.ZipFile(buffer, "w") as new:
            for name in old.namelist():
                new.writestr(name, pickled if name.endswith("/data.pkl") else old.read(name))
        path.write_bytes(buffer.getvalue())
    return path


FORMS = ("zip", "legacy", "protocol 4", "protocol 0")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["os.system", "eval", "subprocess.Popen"])
def test_every_global_outside_the_allow_list_is_unsafe(name, form, tmp_path):
    from fairseq import checkpoint_utils

    from span_plugin.convert.flags import checkpoint_train_flags
    from span_plugin.hub import SpanHubInterface
    from span_plugin.runtime.checkpoints import load_state

    marker = tmp_path / "code_ran"
    payload, named = payloads(marker)[name]
    path = write(tmp_path / "evil.pt", payload, form)
    for call in (load_state, lambda p: checkpoint_utils.load_checkpoint_to_cpu(str(p)),
                 SpanHubInterface.from_pretrained, checkpoint_train_flags):
        with pytest.raises(UnsafeCheckpointError) as info:
            call(path)
        text = str(info.value)
        assert str(path) in text and f"GLOBAL {named}" in text, text
        assert "damaged" not in text and "resume" not in text, text
    assert not marker.exists(), "the planted payload ran"


@pytest.mark.parametrize("unsafe_name", ["checkpoint_last.pt", "checkpoint_best.pt"])
def test_resume_moves_nothing_while_an_unsafe_checkpoint_is_there(unsafe_name, tmp_path):
    """Beside a damaged checkpoint_last.pt (which resume would otherwise move aside) and an
    intact checkpoint_1.pt (which it would otherwise resume from)."""
    from span_plugin.runtime.checkpoints import main

    marker = tmp_path / "code_ran"
    save = tmp_path / "checkpoints"
    save.mkdir()
    shutil.copy(REAL, save / "checkpoint_1.pt")
    (save / "checkpoint_last.pt").write_bytes(REAL.read_bytes()[:20000])  # damaged
    write(save / unsafe_name, payloads(marker)["os.system"][0], "zip")
    before = {p.name: p.read_bytes() for p in save.iterdir()}
    assert main(["resume", str(save)]) == 2
    assert {p.name: p.read_bytes() for p in save.iterdir()} == before
    assert not marker.exists()


def test_the_checkpoints_of_the_package_still_load():
    """The allow-list scan passes what fairseq and span_plugin write (both formats)."""
    for path in sorted((ROOT / "tests" / "fixtures").rglob("*.pt")):
        assert load_checkpoint(path)["model"], path
