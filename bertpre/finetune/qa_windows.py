"""Question-answering examples → model inputs as the model's family reads them: the tokens by the
tokenizer's own template, BERT's `[CLS] question [SEP] context [SEP]`, RoBERTa's `<s> question
</s></s> context </s>` (XLNet's `question [SEP] context [SEP] [CLS]`), the token types by the
family (`model.token_types`); a long context cut into overlapping windows, each context token
mapped back to its characters, and the answer's start and end token in each window as labels
(the start token, found by role, where the window does not hold the answer)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Encoding, Tokenizer

from bertpre.errors import UserError
from bertpre.finetune.qa_data import QAExample
from bertpre.model.config import BertConfig
from bertpre.model.families import token_types
from bertpre.tokenizer.roles import specials_before_second_text, text_segments, token_roles

ENCODE_BATCH = 1024  # examples per call into the tokenizer (it parallelizes inside one call)
# BERT's run_squad.py (and transformers' run_qa.py): windows of 384 tokens, each sharing 128 context
# tokens with the one before; `--task qa`'s default stride, a third of a smaller window
SQUAD_MAX_SEQ_LENGTH = 384
SQUAD_DOC_STRIDE = 128


@dataclass
class QAWindows:
    """Every window of every example, in example order (no padding)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    example_index: list[int]  # the example each window is cut from
    # per token, its (start, end) characters in the example's context; None off the context
    context_offsets: list[list[tuple[int, int] | None]]
    cls_index: list[int]  # where the window's start token ([CLS], <s>) is: the null answer's start and end
    start_positions: list[int]  # the answer's first token, or cls_index when not in this window
    end_positions: list[int]  # the answer's last token (inclusive), or cls_index

    def __len__(self) -> int:
        return len(self.input_ids)


def encode_qa_windows(tokenizer: Tokenizer, examples: Sequence[QAExample], max_seq_length: int = 384,
                      doc_stride: int = 128, *, config: BertConfig) -> QAWindows:
    """The windows of `examples`, labelled with each example's first answer.

    Args:
        config: the model's; its family types the tokens (never the tokenizer, whose overflow
            windows are typed 1 throughout: past an XLM-R's one row of types).
        max_seq_length: tokens in a window, special tokens included.
        doc_stride: context tokens each window shares with the one before, as Hugging Face's
            `run_qa.py` passes it to the tokenizer (`stride`); the original BERT's `doc_stride`
            was the step between windows instead, which is `max context tokens - doc_stride` here.

    Raises:
        UserError: a question (with the special tokens) leaves no room for context within
            `max_seq_length`, naming the example; `doc_stride` is not below that room.
    """
    if tokenizer.post_processor is None:
        raise UserError("the model's tokenizer adds no start and separator tokens (its tokenizer.json has no "
                        "post-processor); give the tokenizer the model was pretrained with")
    cls_id = token_roles(tokenizer).cls_token_id  # the null answer's position
    before_second = specials_before_second_text(tokenizer)
    specials = tokenizer.post_processor.num_special_tokens_to_add(True)
    windowed = Tokenizer.from_str(tokenizer.to_str())
    windowed.no_padding()
    windows = QAWindows([], [], [], [], [], [], [])
    for first in range(0, len(examples), ENCODE_BATCH):
        batch = examples[first:first + ENCODE_BATCH]
        questions = windowed.encode_batch([example.question for example in batch], add_special_tokens=False)
        longest = max(range(len(batch)), key=lambda index: len(questions[index].ids))
        room = max_seq_length - specials - len(questions[longest].ids)
        if room < 1:
            raise UserError(f"question {batch[longest].id!r} has {len(questions[longest].ids)} tokens, which with "
                            f"{specials} special tokens leave no room for its context in --max-seq-length "
                            f"{max_seq_length}: raise --max-seq-length or shorten the question")
        if doc_stride >= room:
            raise UserError(f"--doc-stride {doc_stride} must be smaller than the {room} context tokens a window "
                            f"of --max-seq-length {max_seq_length} holds beside question {batch[longest].id!r}")
        windowed.enable_truncation(max_seq_length, stride=doc_stride, strategy="only_second")
        encodings = windowed.encode_batch([(example.question, example.context) for example in batch])
        for index, (example, encoding) in enumerate(zip(batch, encodings, strict=True)):
            for window in [encoding, *encoding.overflowing]:
                _add_window(windows, window, example, first + index, cls_id, config, before_second)
    return windows


def default_doc_stride(max_seq_length: int, room: int) -> int:
    """The stride a window of `max_seq_length` tokens takes when --doc-stride is not given: SQuAD's
    128, scaled down with a window below its 384 (a third of it), and below `room`, the context
    tokens a window holds beside the longest question, so that every window moves on."""
    scaled = SQUAD_DOC_STRIDE * min(max_seq_length, SQUAD_MAX_SEQ_LENGTH) // SQUAD_MAX_SEQ_LENGTH
    return max(0, min(scaled, room - 1))


def context_room(tokenizer: Tokenizer, examples: Sequence[QAExample], max_seq_length: int) -> int:
    """The context tokens a window of `max_seq_length` holds beside the longest question of
    `examples`, special tokens counted (below 1: that question leaves no room)."""
    if tokenizer.post_processor is None:
        return max_seq_length  # refused by `encode_qa_windows`, which says why
    specials = tokenizer.post_processor.num_special_tokens_to_add(True)
    plain = Tokenizer.from_str(tokenizer.to_str())  # whatever padding or truncation it was saved with
    plain.no_padding()
    plain.no_truncation()
    longest = 0
    for first in range(0, len(examples), ENCODE_BATCH):
        questions = plain.encode_batch([example.question for example in examples[first:first + ENCODE_BATCH]],
                                           add_special_tokens=False)
        longest = max([longest, *(len(question.ids) for question in questions)])
    return max_seq_length - specials - longest


def _add_window(windows: QAWindows, window: Encoding, example: QAExample, example_index: int, cls_id: int,
                config: BertConfig, before_second: int) -> None:
    """Append one window of `example`, with its answer's token positions and its family's types
    (`before_second`: the special tokens before the context, `text_segments`)."""
    offsets = [offset if sequence == 1 else None
               for offset, sequence in zip(window.offsets, window.sequence_ids, strict=True)]
    cls_index = window.ids.index(cls_id)
    start = end = cls_index
    if example.answers:
        answer = example.answers[0]
        inside = [position for position, offset in enumerate(offsets) if offset is not None]
        # the answer counts only when the window holds all of it (as BERT and run_qa.py label)
        if offsets[inside[0]][0] <= answer.start and offsets[inside[-1]][1] >= answer.end:
            start = max(position for position in inside if offsets[position][0] <= answer.start)
            end = min(position for position in inside if offsets[position][1] >= answer.end)
    windows.input_ids.append(window.ids)
    windows.token_type_ids.append(token_types(config, text_segments(window.sequence_ids, before_second)))
    windows.example_index.append(example_index)
    windows.context_offsets.append(offsets)
    windows.cls_index.append(cls_index)
    windows.start_positions.append(start)
    windows.end_positions.append(end)
