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
