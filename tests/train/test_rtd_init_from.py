"""`model.init_from` a replaced-token detection run of BERT, RoBERTa or ModernBERT: with mlm the run
starts from its discriminator's encoder (it was refused as a run whose weights do not fit its own
config.json); with rtd it is refused in one line that says what works, not that the run is corrupt
or holds no ELECTRA weights."""
from __future__ import annotations

import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.replaced_token import ReplacedTokenDetection
from bertpre.tools.export import export
from bertpre.train.trainer import Trainer, pretrain

RTD = ["data.objective=rtd", "data.pair_task=none", "objective.generator_size=0.5"]
# (preset, settings of the first run)
ROWS = {
    "bert": ("tiny", ["data.max_seq_length=32"]),
    "roberta": ("tiny", ["model.architecture=roberta", "model.max_position_embeddings=34", "data.max_seq_length=32"]),
    "modernbert": ("tiny-modernbert", ["data.max_seq_length=32"]),
}
RUN = ["train.log_every=1", "train.eval_every=1000", "data.num_workers=0"]


def continued(architecture: str, data, out, source, objective: str):
    """A config continuing `source` (a run of `architecture`'s row: its shape) with `objective`."""
    preset, settings = ROWS[architecture]
    return load_config(preset, [*settings, f"data.path={data}", f"train.out={out}", f"model.init_from={source}",
                                f"data.objective={objective}", "data.pair_task=none", "train.max_steps=1", *RUN])


@pytest.mark.parametrize("architecture", list(ROWS))
def test_an_rtd_run_continues_with_mlm_from_its_discriminator_and_rtd_is_refused_in_one_line(
        architecture, tiny_data, tmp_path, capsys):
    preset, settings = ROWS[architecture]
    first = pretrain(load_config(preset, [*RTD, *settings, f"data.path={tiny_data}", f"train.out={tmp_path / 'rtd'}",
                                          "train.max_steps=2", "train.save_every=2", *RUN])).run_dir
    discriminator = ReplacedTokenDetection.from_pretrained(first / "checkpoints" / "step-00000002").discriminator_state()
    with Trainer(continued(architecture, tiny_data, tmp_path / "mlm", first, "mlm")) as trainer:
        encoder = trainer.model.get_submodule({"bert": "bert", "roberta": "roberta", "modernbert": "model"}
                                               [architecture])
        compared = [name for name in encoder.state_dict() if f"electra.{name}" in discriminator]
        assert len(compared) > 10  # all but BERT's pooler, which the pair has not
        for name in compared:
            torch.testing.assert_close(encoder.state_dict()[name], discriminator[f"electra.{name}"], rtol=0, atol=0)
    assert "newly initialized" in capsys.readouterr().err  # the masked LM's head: the pair has none
    with pytest.raises(UserError, match=r"is a checkpoint of an rtd run of .*does not continue with "
                                        r"data.objective rtd yet; resume the run itself"):
        Trainer(continued(architecture, tiny_data, tmp_path / "again", first, "rtd"))
    export(first, tmp_path / "export")
    with pytest.raises(UserError, match=r"is the export of an rtd run of .*start from it with data.objective mlm"):
        Trainer(continued(architecture, tiny_data, tmp_path / "again", tmp_path / "export", "rtd"))
    with Trainer(continued(architecture, tiny_data, tmp_path / "from-export", tmp_path / "export", "mlm")) as trainer:
        assert trainer.config.data.objective == "mlm"
