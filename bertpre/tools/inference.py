"""Use a trained model: load it with its tokenizer (export, run or checkpoint), fill masks, score it."""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bertpre.config import load_config
from bertpre.data import load_mixture, open_data
from bertpre.errors import UserError
from bertpre.model import BertForPreTraining, XLNetLMHeadModel
from bertpre.model.cost import ForwardShape
from bertpre.model.families import (
    Family,
    family,
    family_of,
    load_pretraining_model,
    pretraining_config,
)
from bertpre.model.hf_format import LoadingWarning
from bertpre.tokenizer import MASK_TOKEN
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.wordpiece import check_same_vocab
from bertpre.train.evaluation import evaluate, evaluation_forward
from bertpre.train.memory import check_forward_fits
from bertpre.train.model_folders import ModelFolder, resolve_model_folder
from bertpre.train.run_config import read_run_config


@dataclass
class Prediction:
    """One candidate for a masked position."""

    token: str  # the vocabulary's piece (`ĠParis`, `##ing`)
    probability: float
    text: str = ""  # the piece as the tokenizer's decoder writes it (` Paris`, `##ing`)


# The metrics of the pair head (NSP / SOP), in `evaluate`'s results and each mixture source's.
PAIR_METRICS = ("pair_loss", "pair_acc")


@dataclass
class Loading:
    """What loading a model folder left aside, as its `LoadingWarning`s named it."""

    folder: Path
    missing: list[str]  # newly initialized: the folder has no weights for them
    unexpected: list[str]  # the folder's tensors the model has no place for

    def lacks(self, prefix: str | None) -> bool:
        """Whether a part whose weights start with `prefix` was drawn fresh."""
        return prefix is not None and any(name.startswith(prefix) for name in self.missing)

    def note(self, row: Family, consequence: str = "") -> str | None:
        """One `note: ...` line naming the fresh parts as users know them (`Family.optional_parts`)
        and the ignored tensors, then `consequence`; None when there is nothing to say."""
        said = []
        if self.missing:
            labelled = row.fresh_parts(self.missing)
            others = [name for name in self.missing if not name.startswith(tuple(row.optional_parts))]
            said.append(f"{self.folder} has no weights for {', '.join(labelled + others)}; they are newly initialized")
        if self.unexpected:
            shown = ", ".join(self.unexpected[:5]) + (" ..." if len(self.unexpected) > 5 else "")
            said.append(f"ignored {len(self.unexpected)} tensors the model has no place for ({shown})")
        return "note: " + "; ".join(said + ([consequence] if consequence else [])) if said else None


def load_model_and_tokenizer(source: str | Path) -> tuple[BertForPreTraining | XLNetLMHeadModel, Tokenizer]:
    """The pretraining model (in eval mode, of whichever family) and its tokenizer from an EXPORT
    folder, a RUN or a step folder; the parts the folder lacks are named in a note on stderr."""
    model, tokenizer, loading = load_model_folder(resolve_model_folder(source))
    if (note := loading.note(family_of(model))) is not None:
        print(note, file=sys.stderr)
    return model, tokenizer


def load_model_folder(found: ModelFolder) -> tuple[BertForPreTraining | XLNetLMHeadModel, Tokenizer, Loading]:
    """`load_model_and_tokenizer` of a folder already resolved, what loading left aside returned
    rather than said: the caller knows what it means for its command."""
    tokenizer = found.tokenizer()
    found.model_config().check_vocab_fits(tokenizer.get_vocab_size(), str(found.tokenizer_folder))
    model, loading = load_pretraining_quietly(found.model_folder)
    return model.eval(), tokenizer, loading


def load_pretraining_quietly(folder: Path) -> tuple[BertForPreTraining | XLNetLMHeadModel, Loading]:
    """`load_pretraining_model`, its `LoadingWarning`s caught rather than printed: a command says
    them in one note line, not as Python's two-line warning. Other warnings pass on unchanged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_pretraining_model(folder)
    loading = Loading(folder, [], [])
    for warning in caught:
        if isinstance(warning.message, LoadingWarning):
            loading.missing += warning.message.missing
            loading.unexpected += warning.message.unexpected
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return model, loading


@torch.no_grad()
def fill_mask(
    model: BertForPreTraining, tokenizer: Tokenizer, text: str, top_k: int = 5
) -> list[list[Prediction]]:
    """The `top_k` most likely tokens for each mask in `text`, in order of appearance.

    The mask is the tokenizer's own (`<mask>` for RoBERTa and XLM-R), and `[MASK]` is taken for
    it in every family. Special tokens are never proposed: the model is never trained to predict them. Before
    any forward runs, a text longer than the family reads at once (`Family.max_input_tokens`: a
    position table's, ModernBERT's trained length; XLNet reads a long text in windows) is refused,
    and so is one whose forward pass the cost model says would not fit in the device's memory.
    A text is refused rather than cut: cutting would drop the masks past the cut.
    """
    text = with_own_mask(tokenizer, text)
    mask = token_roles(tokenizer).mask_token
    if mask not in text:
        raise UserError(f'the text has no {mask}; write e.g. "The capital of France is {mask}."')
    if top_k < 1:
        raise UserError(f"--top-k must be at least 1, not {top_k}")
    config, device = pretraining_config(model), next(model.parameters()).device
    row = family_of(model)

    def fits(shape: ForwardShape) -> None:
        check_text_length(shape.seq_length, row.max_input_tokens(config))
        check_forward_fits(config, shape, device, what=f"reading the text ({shape.seq_length:,} tokens at once)",
                           advice="shorten the text")

    probabilities = row.mask_logits(model, tokenizer, text, fits).float().softmax(dim=-1)  # (M, V)
    return [[Prediction(token, probability, decoded(tokenizer, token)) for token, probability in candidates]
            for candidates in top_tokens(probabilities, tokenizer, top_k)]


def check_text_length(length: int, limit: int | None) -> None:
    """Refuse, in one line, a text of `length` tokens past the `limit` a model reads at once."""
    if limit is not None and length > limit:
        raise UserError(f"the text is {length:,} tokens long; this model reads at most {limit:,}; shorten the text")


def decoded(tokenizer: Tokenizer, token: str) -> str:
    """A vocabulary piece as text: byte-level BPE's `ĠParis` is ` Paris`, SentencePiece's `▁Paris`
    is `Paris`; a WordPiece piece is its own text (a lone `##ing` keeps its `##`)."""
    return tokenizer.decode([tokenizer.token_to_id(token)], skip_special_tokens=False)


def format_predictions(tokenizer: Tokenizer, predictions: list[list[Prediction]]) -> list[str]:
    """One line for each mask, labelled with the model's own mask token (`[MASK] 1:`, `<mask> 1:`),
    its candidates as text with their probabilities."""
    mask = token_roles(tokenizer).mask_token
    return [f"  {mask} {number}: " + "  ".join(f"{c.text} ({shown_probability(c.probability)})" for c in candidates)
            for number, candidates in enumerate(predictions, start=1)]


def shown_probability(probability: float) -> str:
    """Three decimals, or two significant digits where three would round to 0.000: a model unsure over a large
    vocabulary gives its best candidates 1e-4 each, which three decimals show as 0.000."""
    return f"{probability:.3f}" if probability >= 0.0005 or probability == 0 else f"{probability:.1e}"


def with_own_mask(tokenizer: Tokenizer, text: str) -> str:
    """`text` with BERT's `[MASK]` written as the tokenizer's own mask token (e.g. `<mask>`)."""
    mask = token_roles(tokenizer).mask_token
    return text if mask == MASK_TOKEN else text.replace(MASK_TOKEN, mask)


def top_tokens(probabilities: torch.Tensor, tokenizer: Tokenizer, top_k: int) -> list[list[tuple[str, float]]]:
    """The `top_k` tokens of each row of (M, V) probabilities, special tokens never proposed,
    whatever `top_k`: it is capped at the number of tokens that may be proposed."""
    candidates = proposable_ids(tokenizer, probabilities.shape[-1]).to(probabilities.device)  # (C,)
    top = probabilities[:, candidates].topk(min(top_k, len(candidates)), dim=-1)
    return [
        [(tokenizer.id_to_token(int(i)), float(p)) for p, i in zip(values, indices, strict=True)]
        for values, indices in zip(top.values.cpu(), candidates[top.indices].cpu(), strict=True)
    ]


def proposable_ids(tokenizer: Tokenizer, rows: int) -> torch.Tensor:
    """The ids fill-mask may propose among a model's `rows` outputs: not the special tokens nor
    [UNK] (the model is never trained to predict them), nor the rows past the tokenizer's
    vocabulary (a padded embedding table)."""
    roles = token_roles(tokenizer)
    proposable = torch.zeros(rows, dtype=torch.bool)
    proposable[:tokenizer.get_vocab_size()] = True
    special = roles.special_ids | ({roles.unk_token_id} if roles.unk_token_id is not None else set())
    proposable[sorted(special)] = False
    return proposable.nonzero().flatten()


def fill_in(tokenizer: Tokenizer, text: str, predictions: list[list[Prediction]]) -> str:
    """`text` with each `[MASK]` replaced by its most likely token, decoded as words; a word the
    vocabulary lacks shows as `[UNK]`, as the model saw it, rather than vanishing."""
    ids = tokenizer.encode(with_own_mask(tokenizer, text), add_special_tokens=False).ids  # no [CLS] and [SEP] to hide
    mask_id = token_roles(tokenizer).mask_token_id
    best = iter(tokenizer.token_to_id(candidates[0].token) for candidates in predictions)
    return tokenizer.decode([next(best) if token == mask_id else token for token in ids],
                            skip_special_tokens=False)


def evaluate_saved_model(source: str | Path, data: str | Path | None = None, *,
                         config_path: str | Path | None = None, micro_batch_size: int = 32,
                         seed: int = 42, max_seq_length: int | None = None) -> dict[str, float]:
    """`bertpre evaluate`: a saved model's metrics on a DATA folder's validation split.

    The pairs and masks follow the `data:` section of `config_path`, else of the run's own
    config.yaml, else the defaults; sequences are capped at what the family reads at once
    (`Family.max_input_tokens`: an absolute table's positions, ModernBERT's trained length; BERT's
    relative positions and XLNet read any length). `max_seq_length` scores at another length,
    the cap on predictions scaled with it; a length past that limit is refused (the user typed it). Without
    `data`, the config's `data.path` is scored: for a mixture, each source as `<name>/<metric>`
    and overall as the mixture weighs them (see `MixtureEvaluator`). A micro-batch the cost
    model says would not fit in memory is refused before any is read.
    """
    if micro_batch_size < 1:
        raise UserError(f"--micro-batch-size {micro_batch_size} must be at least 1")
    if seed < 0:
        raise UserError(f"--seed {seed} must be 0 or more")
    source = Path(source)
    if config_path is None and (source / "config.yaml").is_file():
        config_path = source / "config.yaml"
    if data is None and config_path is None:
        raise UserError(f"{source} has no config.yaml naming its data; pass --data DATA or --config CFG")
    own = config_path is not None and Path(config_path) == source / "config.yaml"
    config = read_run_config(source / "config.yaml") if own else load_config(config_path)
    config = config.for_phase(len(config.phase_ends()) - 1)  # a phased run ends at its last length
    found = resolve_model_folder(source)  # once: a RUN's checkpoint is checked against its checksums
    model, tokenizer, loading = load_model_folder(found)
    shape = found.model_config()
    scored = open_data(data) if data is not None else load_mixture(config.data.sources)
    folders = [scored] if data is not None else scored.folders
    for folder in folders:
        check_same_vocab(folder.tokenizer, tokenizer, folder.path, f"model {source}")
    row = family(shape)
    if config.data.objective not in row.objectives:  # an export, or a config of another family's
        config.data.objective = row.objectives[0]
    # no pair head to score (XLNet, RoBERTa; a BERT rtd export's generator), whatever a default config says
    if not row.pair_task or not family_of(model).pair_task:
        config.data.pair_task = "none"
    limit = row.max_input_tokens(shape)  # RoBERTa's table keeps rows before its first token
    if max_seq_length is not None:
        if max_seq_length < 8:
            raise UserError(f"--max-seq-length {max_seq_length} must be at least 8")
        if limit is not None and max_seq_length > limit:
            why = (" (the length it was trained to read)" if shape.relative_positions else
                   " (an absolute position table); models with relative positions "
                   "(model.position_embedding_type rope or transformer_xl) read any length")
            raise UserError(f"--max-seq-length {max_seq_length} is longer than the {limit} positions "
                            f"of {source}{why}")
        cap = config.data.max_predictions_per_seq
        if cap is not None:
            config.data.max_predictions_per_seq = max(1, round(cap * max_seq_length / config.data.max_seq_length))
        config.data.max_seq_length = max_seq_length
        if config.data.max_seq_length % config.data.segment_step:  # plm, clm: segments restart at the length
            config.data.reuse_length = None
    elif limit is not None:
        config.data.max_seq_length = min(config.data.max_seq_length, limit)
    check_forward_fits(shape, evaluation_forward(config.data, micro_batch_size, shape.mem_len),
                       next(model.parameters()).device,
                       what=f"scoring {micro_batch_size:,} sequences of {config.data.max_seq_length:,} tokens at once",
                       advice="lower --micro-batch-size or --max-seq-length")
    # a pair head the folder lacked (a released BertForMaskedLM's) was drawn fresh: its score means nothing
    untrained_pair = config.data.pair_task != "none" and loading.lacks(family_of(model).pair_head)
    consequence = f"{' and '.join(PAIR_METRICS)} are left out: the pair head was never trained" if untrained_pair else ""
    if (note := loading.note(family_of(model), consequence)) is not None:
        print(note, file=sys.stderr)
    metrics = evaluate(model, scored, config.data, micro_batch_size=micro_batch_size, seed=seed)
    if config.data.pair_task == "none" or untrained_pair:  # no pairs scored (NaN), or scored by chance
        metrics = {name: value for name, value in metrics.items() if name.rsplit("/", 1)[-1] not in PAIR_METRICS}
    return metrics
