"""What replaced-token detection costs: the cost model charges both networks (the discriminator on
every token with its one-logit head, the generator's masked LM on the predicted share), exactly as
a FLOP counter measures one training step; `bertpre info` shows both; the memory check counts both."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.replaced_token import ReplacedTokenDetection
from bertpre.train.objectives.rtd import replaced_token_sums
from bertpre.train.setup import check_fits_in_memory, token_flops

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
# the last layer on every row: the cost model counts the whole model, as MFU's convention does
# (`model.last_layer_rows` computes the generator's last layer on its predicted rows alone)
SHAPE = ["model.vocab_size=301", "model.hidden_size=64", "model.num_attention_heads=4",
         "model.intermediate_size=128", "model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0",
         "model.last_layer_rows=false"]


def rtd_config(*overrides: str):
    return load_config(TINY, ["data.objective=rtd", "data.pair_task=none", *SHAPE, *overrides])


@pytest.mark.parametrize("generator_size", [0.25, 0.5])
def test_the_cost_model_charges_what_a_step_computes(generator_size):
    """FlopCounterMode over one forward and backward of both networks equals token_flops × tokens."""
    torch.manual_seed(0)
    config = rtd_config(f"objective.generator_size={generator_size}", "data.max_seq_length=32",
                        "data.max_predictions_per_seq=8", "data.mlm_probability=0.25")
    batch, length, predicted = 4, 32, 8  # the predicted share 8/32 the config's masking gives
    model = ReplacedTokenDetection(config.model, generator_size).train()
    positions = torch.stack([torch.randperm(length - 1)[:predicted] + 1 for _ in range(batch)]).sort(1).values
    input_ids = torch.randint(5, 301, (batch, length))
    inputs = {"input_ids": input_ids.scatter(1, positions, 4), "token_type_ids": torch.zeros_like(input_ids),
              "attention_mask": torch.ones_like(input_ids), "masked_lm_positions": positions,
              "masked_lm_ids": input_ids.gather(1, positions)}
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        mlm, rtd, _ = replaced_token_sums(model, inputs, torch.rand_like)
        (mlm + 50 * rtd).backward()
    assert counter.get_total_flops() == token_flops(config) * batch * length


def test_an_rtd_run_costs_more_than_the_masked_lm_by_its_generator():
    rtd, mlm = rtd_config(), load_config(TINY, ["data.pair_task=none", *SHAPE])
    assert token_flops(mlm) < token_flops(rtd) < 1.6 * token_flops(mlm)
    assert token_flops(rtd_config("objective.generator_size=0.5")) > token_flops(rtd)


def test_info_shows_both_networks_and_counts_the_shared_embeddings_once():
    result = CliRunner().invoke(app, ["info", "--config", str(TINY), *(
        part for value in ["data.objective=rtd", "data.pair_task=none", *SHAPE] for part in ("--set", value))])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[-3:]}
    model = ReplacedTokenDetection(rtd_config().model, 0.25)
    generator = sum(p.numel() for name, p in model.named_parameters() if name.startswith("generator."))
    assert int(rows["generator"][0].replace(",", "")) == generator
    assert int(rows["total"][0].replace(",", "")) == model.num_parameters()
    assert int(rows["discriminator"][0].replace(",", "")) == model.num_parameters() - generator
    flops = [float(rows[name][1]) for name in ("discriminator", "generator", "total")]
    assert flops[0] + flops[1] == pytest.approx(flops[2], abs=0.11)


def test_the_memory_check_counts_the_generator(monkeypatch):
    """A run whose discriminator alone fits is refused when its generator does not fit beside it."""
    config = rtd_config("model.vocab_size=30000", "model.hidden_size=256", "model.intermediate_size=1024",
                        "objective.generator_size=1")
    import bertpre.train.memory as memory
    from bertpre.model.cost import training_memory_floor
    alone = sum(training_memory_floor(config.model, 64, 0.0, config.train.micro_batch_size, device_type="cpu"))
    monkeypatch.setattr(memory, "device_memory", lambda device: (int(alone * 1.5), "this machine has"))
    with pytest.raises(UserError, match="parameters, whose weights|activations") as error:
        check_fits_in_memory(config, torch.device("cpu"))
    assert "\n" not in str(error.value)


def test_the_memory_check_counts_the_generator_s_whole_logits():
    """The generator's loss is never chunked (the objective samples from its logits): its cost
    part, and so `bertpre info`'s and the memory check's floor, counts every predicted row's
    logits, even where `model.loss_chunk_rows` would chunk the discriminator's family's masked LM."""
    from bertpre.model.cost import estimate_memory
    from bertpre.train.objectives import objective_for

    config = rtd_config("model.loss_chunk_rows=4", "data.max_seq_length=32", "data.max_predictions_per_seq=8",
                        "data.mlm_probability=0.25")
    _, generator = objective_for(config.data.objective, config.objective).cost_parts(config)
    assert generator.model.loss_chunk_rows == 0
    assert ReplacedTokenDetection(config.model, 0.25).generator.config == generator.model
    assert estimate_memory(generator.model, 32, 0.25, micro_batch_size=8).loss_chunks is None
    chunked = estimate_memory(replace(generator.model, loss_chunk_rows=4), 32, 0.25, micro_batch_size=8)
    assert chunked.loss_chunks is not None
