"""A family's export of a replaced-token detection run (`data.objective: rtd`) as transformers'
classes: the discriminator's encoder (what `AutoModel` and `bertpre finetune` read), the generator
as a masked-LM class in `generator/`, and the discriminator's head, which no transformers class
holds, in DISCRIMINATOR_HEAD_FILE beside them. ELECTRA's own export is `model.electra`'s.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.electra_generator import GENERATOR_DIR
from bertpre.model.replaced_token import ReplacedTokenDetection

# Beside a family's exported encoder: the discriminator's head, which no transformers class holds.
DISCRIMINATOR_HEAD_FILE = "discriminator_head.safetensors"


def exported_pair(folder: Path) -> bool:
    """Whether `folder` is a family's export of a replaced-token detection run (`family_pair_export_writer`)."""
    return (folder / DISCRIMINATOR_HEAD_FILE).is_file() and (folder / GENERATOR_DIR / hf_format.CONFIG_NAME).is_file()


def family_pair_export_writer(pair: ReplacedTokenDetection, tokenizer_folder: Path, *,
                              write_encoder: Callable[..., dict], encoder_attribute: str,
                              encoder_class: str) -> tuple[str, hf_format.ExportWriter]:
    """A family's rtd run as transformers' classes: the discriminator's encoder as `encoder_class`
    (written by the family's task-folder writer `write_encoder`, under the family's prefix
    `encoder_attribute`), the generator as a masked-LM class in `generator/`
    (`ReplacedTokenParts.export_generator`), each with the tokenizer; and the discriminator's
    head, which no transformers class holds, in DISCRIMINATOR_HEAD_FILE."""
    refusal = pair.parts.refuse_export(pair.config)
    if refusal is not None:
        raise UserError(refusal)
    generator_architecture, write_generator_folder = pair.parts.export_generator(pair.generator, tokenizer_folder)
    state = pair.discriminator_state()
    encoder = {encoder_attribute + name.removeprefix("electra"): tensor for name, tensor in state.items()
               if name.startswith("electra.")}
    head = {name: tensor.detach().contiguous().cpu() for name, tensor in state.items()
            if name.startswith("discriminator_predictions.")}

    def write(staging: Path) -> list[str]:
        hf = write_encoder(staging, encoder, pair.config, tokenizer_folder, pooler=False)
        hf_format.write_json(staging / hf_format.CONFIG_NAME, {**hf, "architectures": [encoder_class]})
        save_file(head, staging / DISCRIMINATOR_HEAD_FILE, metadata={"format": "pt"})
        return write_generator_folder(staging / GENERATOR_DIR)

    return f"{encoder_class} + {GENERATOR_DIR}/ {generator_architecture}", write


def export_note(model: nn.Module) -> str | None:
    """What an export of `model` says beside its classes: where a family's rtd pair keeps the
    discriminator's head (None for any other model)."""
    if not isinstance(model, ReplacedTokenDetection) or not model.parts.exports:
        return None
    return (f"the discriminator head (discriminator_predictions) is not a transformers class: kept in "
            f"{DISCRIMINATOR_HEAD_FILE}; the encoder loads with AutoModel, the generator with "
            f"AutoModelForMaskedLM from {GENERATOR_DIR}/")


def generator_of(model: nn.Module) -> nn.Module:
    """The masked LM that fill-mask reads: a pair's generator, or the model itself."""
    return model.generator if isinstance(model, ReplacedTokenDetection) else model
