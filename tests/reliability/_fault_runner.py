"""Run the bertpre CLI with one fault injected from outside: `python _fault_runner.py ARGS...`.

`BERTPRE_FAULT=name:n` picks the fault; the n-th matching event (1-based) triggers it:

- `enospc_checkpoint:n` / `erofs_checkpoint:n`: the n-th model.safetensors write fails with
  ENOSPC / EROFS (the disk fills up / the folder turns read-only mid-run).
- `erofs_metrics:n`: the n-th metrics.jsonl row write fails with EROFS.
- `kill_in_checkpoint:n`: SIGKILL while the n-th model.safetensors is half written.
- `kill_in_metrics:n`: SIGKILL while the n-th metrics.jsonl row is half written.
- `kill_in_tokenizer_copy:n`: SIGKILL while copying the n-th file of RUN/tokenizer.
- `nan_loss:n` / `inf_loss:n`: the n-th training forward pass returns a NaN / inf MLM loss.
- `pause_before:MODULE.NAME:n`: pause before the n-th call of the function or method NAME
  (e.g. `bertpre.folders.Output.commit`), in whichever process calls it (forked workers count
  their own calls).
- `pause_in_vocab:n`: pause as the vocab trainer reads its n-th batch of sentences (inside
  tokenizers' training, which calls back into Python for them).

A pause creates the file `$BERTPRE_PAUSED` (holding the pausing process's id) and sleeps until
the file is gone (two minutes at most): a test waits for the file, sends its signal, and removes
the file, which lets a pause in a thread that no signal interrupts go on.
"""
from __future__ import annotations

import errno
import functools
import importlib
import os
import signal
import sys
import time


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _nth(n: int):
    """A callable that is True exactly on its n-th call."""
    calls = [0]

    def hit() -> bool:
        calls[0] += 1
        return calls[0] == n

    return hit


def _pause() -> None:
    paused = os.environ["BERTPRE_PAUSED"]
    with open(paused, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 120
    while os.path.exists(paused) and time.monotonic() < deadline:
        time.sleep(0.01)


def _resolve(dotted: str) -> tuple[object, str]:
    """The object holding the attribute `dotted` names (a module or a class), and its name."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            holder = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            holder = getattr(holder, part)
        return holder, parts[-1]
    raise SystemExit(f"BERTPRE_FAULT names nothing importable: {dotted!r}")


def install(fault: str) -> None:
    if fault.startswith("pause_before:"):
        dotted, _, count = fault.removeprefix("pause_before:").rpartition(":")
        hit = _nth(int(count))
        holder, attribute = _resolve(dotted)
        real = getattr(holder, attribute)

        # wraps: the copy keeps the real one's name, so datasets pickles it by reference to a
        # forked worker, where the same name finds this copy again.
        @functools.wraps(real)
        def paused(*args, **kwargs):
            if hit():
                _pause()
            return real(*args, **kwargs)

        setattr(holder, attribute, paused)
        return
    name, _, count = fault.partition(":")
    hit = _nth(int(count or 1))

    if name in ("enospc_checkpoint", "erofs_checkpoint", "kill_in_checkpoint"):
        from bertpre.model import hf_format as hf

        real_save_file = hf.save_file

        def save_file(tensors, path, metadata=None):
            if hit():
                if name == "kill_in_checkpoint":
                    with open(path, "wb") as handle:  # a torn file, as a kill mid-write leaves
                        handle.write(b"\x00" * 100)
                        handle.flush()
                    _die()
                code = errno.ENOSPC if name == "enospc_checkpoint" else errno.EROFS
                raise OSError(code, os.strerror(code), str(path))
            return real_save_file(tensors, path, metadata=metadata)

        hf.save_file = save_file
    elif name in ("erofs_metrics", "kill_in_metrics"):
        from bertpre.train import metrics

        real_log = metrics.MetricsWriter.log

        def log(self, step, scalars):
            if self.enabled and hit():
                if name == "kill_in_metrics":
                    self._jsonl.write(f'{{"step": {step}, "train/lo')
                    self._jsonl.flush()
                    _die()
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.jsonl_path))
            return real_log(self, step, scalars)

        metrics.MetricsWriter.log = log
    elif name == "kill_in_tokenizer_copy":
        import shutil

        real_copytree = shutil.copytree

        def copy2(src, dst, *args, **kwargs):
            if hit():
                with open(src, "rb") as source, open(dst, "wb") as handle:
                    handle.write(source.read()[:10])
                _die()
            return shutil.copy2(src, dst, *args, **kwargs)

        def copytree(src, dst, *args, **kwargs):
            return real_copytree(src, dst, *args, **dict(kwargs, copy_function=copy2))

        shutil.copytree = copytree
    elif name in ("nan_loss", "inf_loss"):
        from bertpre.model.bert import BertForPreTraining

        real_forward = BertForPreTraining.forward
        bad = float("nan") if name == "nan_loss" else float("inf")

        def forward(self, *args, **kwargs):
            out = real_forward(self, *args, **kwargs)
            if self.training and hit():
                out.mlm_loss = out.mlm_loss * bad
                out.mlm_loss_sum = out.mlm_loss_sum * bad
                out.loss = out.loss * bad
            return out

        BertForPreTraining.forward = forward
    elif name == "pause_in_vocab":
        from bertpre.data.encode import SentenceBatches

        real_iter = SentenceBatches.__iter__

        def batches(self):
            for batch in real_iter(self):
                if hit():
                    _pause()
                yield batch

        SentenceBatches.__iter__ = batches
    else:
        raise SystemExit(f"unknown BERTPRE_FAULT {fault!r}")


if __name__ == "__main__":
    if os.environ.get("BERTPRE_FAULT"):
        install(os.environ["BERTPRE_FAULT"])
    from bertpre.cli import main

    sys.argv = ["bertpre", *sys.argv[1:]]
    main()
