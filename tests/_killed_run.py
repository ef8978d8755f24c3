"""A training process killed with SIGKILL right after it saves a chosen checkpoint.

Run as `python -c KILLED_RUN CONFIG STEP OVERRIDES...`: it trains with CONFIG and the overrides,
and dies the moment checkpoint STEP is complete, as a crash or an OOM killer would.
"""
import textwrap

KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    import bertpre.train.trainer as trainer
    from bertpre.config import load_config
    original = trainer.save_checkpoint

    def save_then_die(run_dir, step, **kwargs):
        folder = original(run_dir, step, **kwargs)
        if step == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
        return folder

    trainer.save_checkpoint = save_then_die
    trainer.pretrain(load_config(sys.argv[1], sys.argv[3:]))
""")


class Died(BaseException):
    """An in-process run's 'death' right after a checkpoint (`pretrain_dying_after`)."""


def pretrain_dying_after(config, step: int, monkeypatch) -> None:
    """Train `config` in this process until checkpoint `step` is complete, then stop as a crash
    would (no end-of-run work). In-process, so rows a test registered in a table stay there."""
    import pytest

    import bertpre.train.trainer as trainer

    original = trainer.save_checkpoint

    def save_then_die(run_dir, saved_step, **kwargs):
        folder = original(run_dir, saved_step, **kwargs)
        if saved_step == step:
            raise Died
        return folder

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_checkpoint", save_then_die)
        with pytest.raises(Died):
            trainer.pretrain(config)
