"""Does `bertpre finetune --task qa` answer questions as well as a plain transformers loop of the
same model does, and how long does each take? Exact match and F1 (mean ± std over seeds) and the
seconds each side spends training and answering.

- model: a small BERT (2 layers, hidden 128, vocab 8,000) pretrained here by `bertpre pretrain`
  (300 steps of 32 × 128, NSP) and written by `bertpre export`: on WikiText-2 (validation + test
  files of ../shared/corpora) for English, on ../shared/corpora/zh-fortunes.txt (Debian's
  fortunes-zh, which holds the very poems the Chinese set asks about: the overlap is counted) for
  Chinese; or `--source` (an export, a RUN or a checkpoint; exported here when it is not one).
- task: SQuAD v1.1 files (`--train`, `--dev`, `--test`), or built here by `--build wordnet|poems`
  (`data_prep.wordnet_questions`, `data_prep.poem_questions`, seed 0); `--max-questions` training
  questions (default 1,000) and `--max-eval` scored (default 150: the test split's first), at
  most `--per-context` (default 12; dev and test: `--per-context-eval`, 10) of a context's (a poem
  context holds ~60 questions: without the cap, 400 questions came from 5 contexts).
- bertpre: the library calls behind `bertpre finetune --task qa` (`load_encoder`, `load_qa_task`,
  `encode_qa_windows`, `train_question_answering`, `window_logits`, `predict_answers`,
  `qa_scores`), full mode, the `squad` preset with a small model's settings: lr 1e-3, 3 epochs,
  batch 16, windows of 192 tokens sharing 64 (`--doc-stride`), so that most contexts take two.
  The defaults are sized for a shared 2-core machine (~17 min a language); at this size the
  models learn little (F1 about 8), so the checks below carry more of the comparison than the
  scores do.
- reference: what a transformers user writes (the `run_qa_no_trainer` example's shape), every
  QA piece written here and not imported from bertpre: its own SQuAD reader,
  `BertTokenizerFast.from_pretrained(EXPORT)` called with truncation="only_second", stride and
  offsets for the windows, its own start/end labelling, `AutoModelForQuestionAnswering`, a
  DataLoader with `DataCollatorWithPadding`, AdamW without decay on bias and LayerNorm weights,
  `get_linear_schedule_with_warmup`, clipping at 1.0; its own n-best post-processing and its own
  metric (SQuAD v1.1's official EM/F1 for English, CMRC 2018's EM and character F1 for Chinese).
- checks: both sides cut the same windows (count, token ids, token types, context offsets,
  labels: mismatches counted); the same epoch order; the same initial head for a seed; a
  same-math run (dropout off, 20 steps, the losses side by side); each side's post-processing on
  the other's logits and each side's metric on the other's predictions, answer by answer.
- same for both: the exported weights, hyperparameters, fp32, torch threads. Sides alternate
  which goes first, seed by seed, so load from other work hits both; the load average is recorded
  before each seed.
- timing: training alone (model built, first batch to last step; windowing and tokenizer loading
  excluded, timed once apart), and answering (every test window's logits, then the answers).

Writes bench/results/NAME-DATE.json (NAME qa, qa-zh for Chinese): per seed each side's EM/F1 and
times; per side mean ± std; bertpre − reference with a 95% Welch interval [goal: within noise,
i.e. the interval holds 0]; the time ratios.

    .venv/bin/python -m bench.qa --build wordnet --threads 1              # English, ~17 min on 2 cores
    .venv/bin/python -m bench.qa --build poems --language zh --threads 1  # Chinese
    .venv/bin/python -m bench.qa --train T.json --dev D.json --test E.json --source EXPORT
    .venv/bin/python -m bench.qa --quick --build wordnet      # a few minutes: tiny model, few questions
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import string
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bench.common import CORPORA, RESULTS, write_result
from bench.finetune import mean_std, model_folder
from bench.learning import welch

QUICK = {"pretrain_steps": 20, "hidden": 64, "layers": 2, "vocab_size": 2000, "max_questions": 300,
         "max_eval": 100, "seeds": 2, "epochs": 1}
# What the checks found in bertpre on 2026-11-26, written into each result beside the figures.
FINDINGS = [
    "fixed 2026-11-26 after the first runs: bertpre's span_loss took the softmax over every position of the padded "
    "batch (as transformers' loss does), so a window's loss depended on how long its batch-mates were; it now leaves "
    "padding out (same_math.own_losses_* differ from transformers' on padded batches for that reason).",
    "fixed 2026-11-26 after the first runs: bertpre's Chinese F1 and exact match removed ASCII punctuation (and '…'); "
    "they now follow CMRC 2018's script, which removes only its own list and keeps ASCII marks as tokens.",
    "An answer whose text starts or ends with a space is labelled with the token before or after it (as run_qa.py "
    "labels); the bench's own labels take the tokens holding the answer's first and last character.",
]
CORPUS = {"en": ("wikitext2-valid.txt", "wikitext2-test.txt"), "zh": ("zh-fortunes.txt",)}


# ---------------------------------------------------------------- the reference's own QA pieces

@dataclass(frozen=True)
class Question:
    """A SQuAD question as the reference reads it: answers as (text, answer_start)."""

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]


def read_squad(path: Path) -> list[Question]:
    """A SQuAD v1.1 file's questions in file order."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return [Question(str(qa["id"]), qa["question"], paragraph["context"],
                     tuple((answer["text"], answer["answer_start"]) for answer in qa["answers"]))
            for article in document["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


@dataclass
class Windows:
    """The reference's windows: per window its ids, token types, question, context offsets (None
    off the context) and labels."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    question: list[int]
    offsets: list[list[tuple[int, int] | None]]
    start_positions: list[int]
    end_positions: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)


def label_span(offsets: list[tuple[int, int] | None], first_char: int, end_char: int, cls_index: int) -> tuple[int, int]:
    """The tokens holding an answer's first and last character (`end_char` is just past it); the
    [CLS] position for both when the window does not hold the whole answer."""
    context = [position for position, offset in enumerate(offsets) if offset is not None]
    if not context or offsets[context[0]][0] > first_char or offsets[context[-1]][1] < end_char:
        return cls_index, cls_index
    start = next(position for position in context if offsets[position][1] > first_char)
    end = next(position for position in reversed(context) if offsets[position][0] < end_char)
    return start, end


def make_windows(tokenizer, questions: list[Question], max_length: int, stride: int) -> Windows:
    """Every question's windows, as run_qa cuts them: the tokenizer's own overflow."""
    encoded = tokenizer([q.question for q in questions], [q.context for q in questions], truncation="only_second",
                        max_length=max_length, stride=stride, return_overflowing_tokens=True,
                        return_offsets_mapping=True)
    windows = Windows([], [], [], [], [], [])
    for row, number in enumerate(encoded["overflow_to_sample_mapping"]):
        ids = encoded["input_ids"][row]
        offsets = [tuple(offset) if sequence == 1 else None
                   for offset, sequence in zip(encoded["offset_mapping"][row], encoded.sequence_ids(row), strict=True)]
        cls_index = ids.index(tokenizer.cls_token_id)
        text, first = questions[number].answers[0]
        start, end = label_span(offsets, first, first + len(text), cls_index)
        windows.input_ids.append(ids)
        windows.token_type_ids.append(encoded["token_type_ids"][row])
        windows.question.append(number)
        windows.offsets.append(offsets)
        windows.start_positions.append(start)
        windows.end_positions.append(end)
    return windows


def best_answer(context: str, windows: list[tuple[list, list[float], list[float]]], n_best: int,
                max_answer_length: int) -> str:
    """The highest start + end logit span over a question's windows, each window's `n_best`
    starts × `n_best` ends tried, the span on the context, at most `max_answer_length` tokens;
    "" when no window offers one. `windows`: (offsets, start logits, end logits) each."""
    best, answer = -math.inf, ""
    for offsets, starts, ends in windows:
        tokens = range(len(offsets))
        for start in sorted(tokens, key=lambda position: -starts[position])[:n_best]:
            for end in sorted(tokens, key=lambda position: -ends[position])[:n_best]:
                if offsets[start] is None or offsets[end] is None or not 0 <= end - start < max_answer_length:
                    continue
                score = float(starts[start]) + float(ends[end])
                if score > best:
                    best, answer = score, context[offsets[start][0]:offsets[end][1]]
    return answer


def squad_normalize(text: str) -> str:
    """SQuAD v1.1's evaluation script's normalize_answer."""
    text = "".join(character for character in text.lower() if character not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, gold: str) -> float:
    """SQuAD v1.1's f1_score."""
    predicted, expected = squad_normalize(prediction).split(), squad_normalize(gold).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


# CMRC 2018's evaluation script's sp_char ("……" is one of its entries: a character never equals it)
CMRC_PUNCTUATION = ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”",
                    "；", "’", "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]


def cmrc_segments(text: str) -> list[str]:
    """CMRC 2018's mixed_segmentation with rm_punc: each ideograph alone, other runs split into
    words (nltk's word_tokenize there; words and punctuation marks here), its punctuation dropped."""
    segments, run = [], ""
    for character in text.lower().strip():
        if character in CMRC_PUNCTUATION:
            continue
        if re.match("[\u4e00-\u9fa5]", character):
            segments += re.findall(r"\w+|[^\w\s]", run)
            run = ""
            segments.append(character)
        else:
            run += character
    return segments + re.findall(r"\w+|[^\w\s]", run)


def cmrc_f1(prediction: str, gold: str) -> float:
    """CMRC 2018's calc_f1_score for one gold answer: the longest common substring of segments."""
    predicted, expected = cmrc_segments(prediction), cmrc_segments(gold)
    longest = 0
    for i in range(len(predicted)):
        for j in range(len(expected)):
            run = 0
            while i + run < len(predicted) and j + run < len(expected) and predicted[i + run] == expected[j + run]:
                run += 1
            longest = max(longest, run)
    if longest == 0:
        return 0.0
    precision, recall = longest / len(predicted), longest / len(expected)
    return 2 * precision * recall / (precision + recall)


def cmrc_exact(prediction: str, gold: str) -> float:
    """CMRC 2018's calc_em_score for one gold answer (its remove_punctuation on both)."""
    def strip(text: str) -> str:
        return "".join(character for character in text.lower().strip() if character not in CMRC_PUNCTUATION)
    return float(strip(prediction) == strip(gold))


def question_scores(prediction: str, golds: list[str], language: str) -> tuple[float, float]:
    """(exact match, F1) of one answer: the best over the gold answers."""
    if language == "zh":
        return max(cmrc_exact(prediction, gold) for gold in golds), max(cmrc_f1(prediction, gold) for gold in golds)
    return (max(float(squad_normalize(prediction) == squad_normalize(gold)) for gold in golds),
            max(squad_f1(prediction, gold) for gold in golds))


def score(predictions: dict[str, str], questions: list[Question], language: str) -> dict[str, float]:
    """Exact match and F1 in percent over `questions` (a missing prediction scores 0)."""
    pairs = [question_scores(predictions.get(q.id, ""), [text for text, _ in q.answers], language) for q in questions]
    return {"exact_match": 100 * sum(pair[0] for pair in pairs) / len(pairs),
            "f1": 100 * sum(pair[1] for pair in pairs) / len(pairs)}


# ---------------------------------------------------------------- the two sides

class Bertpre:
    """bertpre's side: the library calls `bertpre finetune --task qa` makes, timed apart."""

    def __init__(self, export: Path, files: dict[str, Path], hp, settings) -> None:
        from bertpre.finetune.qa_seeds import answer_language, load_qa_task
        from bertpre.finetune.qa_windows import encode_qa_windows
        from bertpre.finetune.source import load_encoder
        from bertpre.train.runtime import init_runtime

        self.hp, self.settings, self.runtime = hp, settings, init_runtime("fp32", device="cpu")
        self.encoder = load_encoder(export)
        self.data = load_qa_task(files["train"], files["dev"], files.get("test"), settings)
        self.language = answer_language(self.data.validation, settings.language)
        self.scored = self.data.test if self.data.test is not None else self.data.validation
        began = time.perf_counter()
        self.train, self.test = (encode_qa_windows(self.encoder.tokenizer, examples, hp.max_seq_length,
                                                   settings.doc_stride, config=self.encoder.config)
                                 for examples in (self.data.train, self.scored))
        self.windowing_s = time.perf_counter() - began

    def run(self, seed: int) -> tuple[dict, dict[str, str], tuple]:
        """One seed: its scores and times, its answers, its logits."""
        from bertpre.finetune.loop import pad_token_id
        from bertpre.finetune.qa_answers import predict_answers
        from bertpre.finetune.qa_loop import train_question_answering, window_logits
        from bertpre.finetune.qa_metrics import qa_scores

        began = now()
        model = train_question_answering(self.encoder, self.train, hp=self.hp, seed=seed, runtime=self.runtime)
        trained = now()
        logits = window_logits(model, self.test, batch_size=self.hp.eval_batch_size, pad_id=pad_token_id(self.encoder),
                               runtime=self.runtime, padding_side=self.encoder.padding_side)
        predictions = predict_answers(self.scored, self.test, *logits, self.settings.n_best_size,
                                      self.settings.max_answer_length)
        answered = now()
        answers = {prediction.id: prediction.text for prediction in predictions}
        scores = qa_scores(answers, self.scored, self.language)
        return timings(scores, began, trained, answered, len(self.train), len(self.test), self.hp.epochs), answers, logits

    def order(self, seed: int) -> list[int]:
        from bertpre.finetune.loop import shuffled_batches

        generator = torch.Generator().manual_seed(seed)
        return [index for batch in shuffled_batches(len(self.train), self.hp.batch_size, generator) for index in batch]


class Reference:
    """The transformers user's loop (run_qa_no_trainer's shape) on the same export and files."""

    def __init__(self, export: Path, files: dict[str, Path], hp, settings, language: str) -> None:
        import transformers

        self.transformers, self.hp, self.settings, self.export = transformers, hp, settings, export
        self.language = language
        transformers.logging.set_verbosity_error()  # the load report of the head's new weights
        self.tokenizer = transformers.BertTokenizerFast.from_pretrained(str(export))
        self.train_questions = read_squad(files["train"])
        self.questions = read_squad(files["test"] if files.get("test") else files["dev"])
        began = time.perf_counter()
        self.train, self.test = (make_windows(self.tokenizer, questions, hp.max_seq_length, settings.doc_stride)
                                 for questions in (self.train_questions, self.questions))
        self.windowing_s = time.perf_counter() - began
        self.collator = transformers.DataCollatorWithPadding(self.tokenizer)

    def features(self, windows: Windows, labelled: bool) -> list[dict]:
        rows = []
        for index in range(len(windows)):
            row = {"input_ids": windows.input_ids[index], "token_type_ids": windows.token_type_ids[index],
                   "attention_mask": [1] * len(windows.input_ids[index])}
            if labelled:
                row |= {"start_positions": windows.start_positions[index], "end_positions": windows.end_positions[index]}
            rows.append(row)
        return rows

    def loader(self, seed: int | None) -> torch.utils.data.DataLoader:
        """Training windows shuffled from `seed`, or (None) the test windows in order."""
        if seed is None:
            return torch.utils.data.DataLoader(self.features(self.test, False), batch_size=self.hp.eval_batch_size,
                                               collate_fn=self.collator)
        rows = self.features(self.train, True)
        sampler = torch.utils.data.RandomSampler(rows, generator=torch.Generator().manual_seed(seed))
        return torch.utils.data.DataLoader(rows, sampler=sampler, batch_size=self.hp.batch_size,
                                           collate_fn=self.collator)

    def model(self, **overrides):
        return self.transformers.AutoModelForQuestionAnswering.from_pretrained(str(self.export), **overrides)

    def optimizer(self, model) -> torch.optim.AdamW:
        no_decay = ("bias", "LayerNorm.weight")
        return torch.optim.AdamW(
            [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
              "weight_decay": self.hp.weight_decay},
             {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
              "weight_decay": 0.0}], lr=self.hp.lr)

    def run(self, seed: int) -> tuple[dict, dict[str, str], list]:
        transformers = self.transformers
        transformers.set_seed(seed)
        began = now()
        model = self.model()
        optimizer = self.optimizer(model)
        train = self.loader(seed)
        total = self.hp.epochs * len(train)
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(total * self.hp.warmup_ratio), total)
        model.train()
        for _ in range(self.hp.epochs):
            for batch in train:
                model(**batch).loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.hp.max_grad_norm)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
        trained = now()
        logits = self.logits(model)
        answers = self.answer(logits)
        answered = now()
        result = timings(score(answers, self.questions, self.language), began, trained, answered, len(self.train),
                         len(self.test), self.hp.epochs)
        result["attention"] = model.config._attn_implementation
        return result, answers, logits

    @torch.no_grad()
    def logits(self, model) -> list[tuple[list[float], list[float]]]:
        """Every test window's start and end logits over its own tokens."""
        model.eval()
        rows = []
        for batch in self.loader(None):
            output = model(**batch)
            lengths = batch["attention_mask"].sum(1).tolist()
            for starts, ends, length in zip(output.start_logits, output.end_logits, lengths, strict=True):
                rows.append((starts[:length].tolist(), ends[:length].tolist()))
        return rows

    def answer(self, logits: list[tuple[list[float], list[float]]], windows: Windows | None = None) -> dict[str, str]:
        """Each test question's answer from its windows' logits."""
        windows = windows or self.test
        by_question: dict[int, list] = {}
        for index, number in enumerate(windows.question):
            by_question.setdefault(number, []).append((windows.offsets[index], *logits[index]))
        return {q.id: best_answer(q.context, by_question.get(number, []), self.settings.n_best_size,
                                  self.settings.max_answer_length) for number, q in enumerate(self.questions)}

    def order(self, seed: int) -> list[int]:
        return list(self.loader(seed).sampler)


def now() -> tuple[float, float]:
    """(wall, this process's CPU) seconds."""
    return time.perf_counter(), time.process_time()


def timings(scores: dict, began: tuple, trained: tuple, answered: tuple, train: int, test: int, epochs: int) -> dict:
    """EM and F1, training and answering seconds (wall and CPU), windows per second."""
    train_s, answer_s = trained[0] - began[0], answered[0] - trained[0]
    return {"exact_match": scores["exact_match"], "f1": scores["f1"], "train_s": round(train_s, 2),
            "answer_s": round(answer_s, 2), "train_cpu_s": round(trained[1] - began[1], 2),
            "answer_cpu_s": round(answered[1] - trained[1], 2), "train_windows_per_s": epochs * train / train_s,
            "answer_windows_per_s": test / answer_s}


# ---------------------------------------------------------------- the checks

def same_windows(ours, reference: Reference) -> dict:
    """Window by window, how many differ between the sides (0 everywhere: the same windows)."""
    report = {}
    for split, mine, theirs, examples in (("train", ours.train, reference.train, ours.data.train),
                                          ("test", ours.test, reference.test, ours.scored)):
        counts = {"windows": [len(mine), len(theirs)]}
        if len(mine) == len(theirs):
            counts |= {
                "input_ids_differ": sum(a != b for a, b in zip(mine.input_ids, theirs.input_ids, strict=True)),
                "token_type_ids_differ": sum(a != b for a, b in zip(mine.token_type_ids, theirs.token_type_ids,
                                                                    strict=True)),
                "question_differs": sum(a != b for a, b in zip(mine.example_index, theirs.question, strict=True)),
                "offsets_differ": sum(a != b for a, b in zip(mine.context_offsets, theirs.offsets, strict=True)),
                "labels_differ": sum((a, b) != (c, d) for a, b, c, d in zip(
                    mine.start_positions, mine.end_positions, theirs.start_positions, theirs.end_positions,
                    strict=True))}
            different = [index for index in range(len(mine)) if (mine.start_positions[index], mine.end_positions[index])
                         != (theirs.start_positions[index], theirs.end_positions[index])]
            counts["label_examples"] = [{"window": index, "bertpre": [mine.start_positions[index],
                                                                     mine.end_positions[index]],
                                         "reference": [theirs.start_positions[index], theirs.end_positions[index]]}
                                        for index in different[:5]]
        questions = Counter(mine.example_index)
        counts["questions_in_several_windows"] = sum(count > 1 for count in questions.values())
        counts["questions"] = len(questions)
        counts["contexts"] = len({example.context for example in examples})
        counts["contexts_in_several_windows"] = len({examples[q].context for q, count in questions.items() if count > 1})
        counts["answer_in_no_window"] = sum(
            all(mine.start_positions[i] == mine.cls_index[i] for i in range(len(mine)) if mine.example_index[i] == q)
            for q in questions) if split == "train" else None
        report[split] = counts
    return report


def same_initial_head(ours: Bertpre, reference: Reference, seed: int = 0) -> bool:
    """A seed draws the same qa_outputs on both sides (bertpre draws it first after the seed)."""
    from bertpre.finetune.model import build_task_model

    reference.transformers.set_seed(seed)
    theirs = reference.model()
    torch.manual_seed(seed)
    mine = build_task_model(ours.encoder.config, ours.encoder.state, 2, tagging=False, question_answering=True)
    return all(torch.equal(getattr(mine.qa_outputs, name), getattr(theirs.qa_outputs, name))
               for name in ("weight", "bias"))


def masked_span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, attention_mask: torch.Tensor,
                     start_positions: torch.Tensor, end_positions: torch.Tensor) -> torch.Tensor:
    """The mean of the start and end cross-entropy over each window's real tokens alone (padding
    masked out), so that what either model gives its padding positions does not enter."""
    padding = attention_mask == 0
    return (torch.nn.functional.cross_entropy(start_logits.masked_fill(padding, -math.inf), start_positions)
            + torch.nn.functional.cross_entropy(end_logits.masked_fill(padding, -math.inf), end_positions)) / 2


def same_math(ours: Bertpre, reference: Reference, steps: int = 20) -> dict:
    """Both loops with their randomness taken out (dropout off, both heads from seed 0, the lr
    held at its peak), `steps` batches in seed 0's order, trained on the loss over real tokens
    (`masked_span_loss`, one code for both): the largest difference of those losses, step by step.
    Equal losses mean the same model, gradients, clipping and update.

    Beside it, each side's own loss on the same batch (bertpre's `span_loss`, transformers'
    `outputs.loss`): both take the softmax over the padded batch's every position, padding
    included, so they differ by what each model puts at padding positions."""
    from bertpre.finetune.loop import model_inputs, pad_token_id
    from bertpre.finetune.model import build_task_model
    from bertpre.finetune.qa_loop import pad_windows, span_loss
    from bertpre.train.optim import parameter_groups

    quiet = replace(ours.encoder.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    reference.transformers.set_seed(0)
    theirs = reference.model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    mine = build_task_model(quiet, ours.encoder.state, 2, tagging=False, question_answering=True)
    optimizers = (torch.optim.AdamW(parameter_groups(mine, ours.hp.weight_decay), lr=ours.hp.lr),
                  reference.optimizer(theirs))
    order, pad = ours.order(0), pad_token_id(ours.encoder)
    losses, own, padded = [], [], 0
    padding_logits = None
    mine.train()
    theirs.train()
    for step, their_batch in zip(range(steps), reference.loader(0), strict=False):
        indices = order[step * ours.hp.batch_size:(step + 1) * ours.hp.batch_size]
        batch = pad_windows(ours.train, indices, pad)
        mask = batch["attention_mask"]
        padded += int((mask == 0).any())
        logits = mine(**model_inputs(mine, batch, torch.device("cpu")))  # (B, T, 2)
        output = theirs(**their_batch)
        if padding_logits is None and (mask == 0).any():
            padding_logits = {"bertpre": sorted({round(float(v), 6) for v in logits.detach()[..., 0][mask == 0]})[:3],
                              "reference": [round(float(v), 6) for v in output.start_logits.detach()[mask == 0][:3]]}
        own.append([float(span_loss(logits.detach(), batch["start_positions"], batch["end_positions"])),
                    float(output.loss.detach())])
        pair = (masked_span_loss(logits[..., 0], logits[..., 1], mask, batch["start_positions"], batch["end_positions"]),
                masked_span_loss(output.start_logits, output.end_logits, their_batch["attention_mask"],
                                 their_batch["start_positions"], their_batch["end_positions"]))
        for model, optimizer, loss in zip((mine, theirs), optimizers, pair, strict=True):
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), ours.hp.max_grad_norm)
            optimizer.step()
        losses.append([float(loss.detach()) for loss in pair])
    return {"steps": len(losses), "batches_with_padding": padded,
            "largest_loss_difference": max(abs(a - b) for a, b in losses),
            "first_and_last_losses": [losses[0], losses[-1]],
            "own_losses_first_step": own[0], "own_losses_largest_difference": max(abs(a - b) for a, b in own),
            "padding_start_logits_first_padded_batch": padding_logits}


def cross_check(ours: Bertpre, reference: Reference, our_answers: dict, our_logits: tuple,
                their_answers: dict, their_logits: list) -> dict:
    """Each side's post-processing on the other's logits, each side's metric on the other's
    answers: the questions where the two disagree, and a few of them."""
    from bertpre.finetune.qa_answers import predict_answers
    from bertpre.finetune.qa_metrics import exact_match, f1_score, qa_scores

    report: dict = {}
    if len(ours.test) == len(reference.test):
        starts, ends = our_logits
        mine_on_ours = reference.answer([(starts[i, :len(ours.test.input_ids[i])].tolist(),
                                          ends[i, :len(ours.test.input_ids[i])].tolist()) for i in range(len(ours.test))])
        width = max(len(row[0]) for row in their_logits)
        padded = [[row[k] + [0.0] * (width - len(row[k])) for row in their_logits] for k in (0, 1)]
        theirs_on_ours = {p.id: p.text for p in predict_answers(ours.scored, ours.test, *(torch.tensor(rows).numpy()
                                                                                           for rows in padded),
                                                                ours.settings.n_best_size,
                                                                ours.settings.max_answer_length)}
        for name, left, right in (("bertpre_logits", our_answers, mine_on_ours),
                                  ("reference_logits", theirs_on_ours, their_answers)):
            differ = [id_ for id_ in left if left[id_] != right.get(id_)]
            report[f"post_processing_on_{name}"] = {
                "answers_differ": len(differ), "of": len(left),
                "examples": [{"id": id_, "bertpre": left[id_], "reference": right.get(id_)} for id_ in differ[:5]]}
    golds = {q.id: [text for text, _ in q.answers] for q in reference.questions}
    for name, answers in (("bertpre_answers", our_answers), ("reference_answers", their_answers)):
        theirs = score(answers, reference.questions, reference.language)
        mine = qa_scores(answers, ours.scored, ours.language)
        differ = []
        for id_, gold in golds.items():
            bench_pair = question_scores(answers.get(id_, ""), gold, reference.language)
            library_pair = (max(exact_match(answers.get(id_, ""), g, ours.language) for g in gold),
                            max(f1_score(answers.get(id_, ""), g, ours.language) for g in gold))
            if bench_pair != library_pair:
                differ.append({"id": id_, "answer": answers.get(id_, ""), "gold": gold,
                               "bench_em_f1": bench_pair, "bertpre_em_f1": library_pair})
        report[f"metrics_on_{name}"] = {"bench": theirs, "bertpre": {k: mine[k] for k in ("exact_match", "f1")},
                                        "questions_differ": len(differ), "examples": differ[:5]}
    return report


# ---------------------------------------------------------------- model, data, main

BUILDERS = {"wordnet": ("wordnet_questions", Path("/usr/share/wordnet")),
            "poems": ("poem_questions", Path("/usr/share/games/fortunes"))}


def task_files(args, folder: Path) -> dict[str, Path]:
    """--train/--dev/--test, or the set `--build` names made by its data_prep module (seed 0),
    cut to --max-questions and --max-eval, at most --per-context (--per-context-eval) questions
    a context."""
    if args.build:
        import importlib

        module, source = BUILDERS[args.build]
        importlib.import_module(f"data_prep.{module}").build(source, folder / "built", seed=0)
        given = {split: folder / "built" / f"{split}.json" for split in ("train", "dev", "test")}
    else:
        given = {"train": args.train, "dev": args.dev, **({"test": args.test} if args.test else {})}
    folder.mkdir(parents=True, exist_ok=True)
    return {split: first_questions(path, folder / f"{split}.json",
                                   *((args.max_questions, args.per_context) if split == "train"
                                     else (args.max_eval, args.per_context_eval)))
            for split, path in given.items()}


def corpus_overlap(language: str, questions: list[Question]) -> dict:
    """How many scored answers, and contexts, occur word for word in the pretraining corpus."""
    files = [CORPORA / name for name in CORPUS[language]]
    if not all(path.is_file() for path in files):
        return {}
    text = "\n".join(path.read_text(encoding="utf-8") for path in files)
    contexts = {q.context for q in questions}
    return {"answers_in_corpus": sum(q.answers[0][0] in text for q in questions), "questions": len(questions),
            "context_lines_in_corpus": sum(line.strip() in text for c in contexts for line in c.splitlines()
                                           if len(line.strip()) > 4),
            "context_lines": sum(len(line.strip()) > 4 for c in contexts for line in c.splitlines())}


def first_questions(path: Path, out: Path, limit: int | None, per_context: int | None = None) -> Path:
    """The SQuAD file's first `limit` questions (all for None), at most `per_context` of each
    context's (so that a few long contexts do not make the whole set), in file order."""
    if limit is None and per_context is None:
        return Path(path)
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    kept, left = [], math.inf if limit is None else limit
    for article in document["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = paragraph["qas"][:min(left, per_context or left)]
            if qas:
                left -= len(qas)
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            kept.append({**article, "paragraphs": paragraphs})
    out.write_text(json.dumps({"version": document.get("version", "1.1"), "data": kept}, ensure_ascii=False),
                   encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None,
                        help="a pretrained model (export, RUN or checkpoint); default: pretrain one here")
    parser.add_argument("--train", type=Path)
    parser.add_argument("--dev", type=Path)
    parser.add_argument("--test", type=Path, default=None, help="scored when given, else --dev")
    parser.add_argument("--build", choices=sorted(BUILDERS), default=None,
                        help="build the set here: wordnet (data_prep.wordnet_questions), poems (data_prep.poem_questions)")
    parser.add_argument("--language", choices=("en", "zh"), default="en",
                        help="the pretraining corpus and the metric: en WikiText-2 / SQuAD, zh fortunes-zh / CMRC")
    parser.add_argument("--quick", action="store_true", help="minutes: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-questions", type=int, default=1000, help="training questions kept (0: all)")
    parser.add_argument("--max-eval", type=int, default=150, help="questions kept in dev and test each (0: all)")
    parser.add_argument("--per-context", type=int, default=12, help="training questions kept a context (0: all)")
    parser.add_argument("--per-context-eval", type=int, default=10, help="dev and test questions kept a context (0: all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-length", type=int, default=192)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--max-answer-length", type=int, default=30)
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--pretrain-length", type=int, default=128, help="pretraining's sequence length")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--name", default=None, help="result file's name (default qa, qa-zh)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
    for name in ("max_questions", "max_eval", "per_context", "per_context_eval"):
        setattr(args, name, getattr(args, name) or None)  # 0: all
    if not args.build and not (args.train and args.dev):
        parser.error("give --train and --dev (and --test), or --build")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    started = time.perf_counter()

    from bertpre.finetune import PRESETS
    from bertpre.finetune.qa_seeds import QASettings

    hp = replace(PRESETS["squad"], lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                 max_seq_length=args.max_seq_length)
    settings = QASettings(doc_stride=args.doc_stride, max_answer_length=args.max_answer_length, language=args.language)
    results: dict[str, list[dict]] = {"bertpre": [], "reference": []}
    checks: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bertpre-bench-qa-") as scratch:
        scratch = Path(scratch)
        began = time.perf_counter()
        export = model_folder(args, scratch, corpus=CORPUS[args.language], overrides=(
            f"data.max_seq_length={args.pretrain_length}", "data.max_predictions_per_seq=null"))
        pretrain_s = time.perf_counter() - began
        files = task_files(args, scratch / "task")
        ours = Bertpre(export, files, hp, settings)
        reference = Reference(export, files, hp, settings, ours.language)
        windows = same_windows(ours, reference)
        overlap = corpus_overlap(args.language, reference.questions) if args.source is None else {}
        print(f"task ({ours.language}): {len(ours.data.train):,} training questions in {len(ours.train):,} windows "
              f"({windows['train']['contexts_in_several_windows']:,} of {windows['train']['contexts']:,} contexts in more "
              f"than one), "
              f"{len(ours.scored):,} scored in {len(ours.test):,}; model {export}", flush=True)
        print(f"same windows: {windows}", flush=True)
        order = ours.order(0) == reference.order(0)
        head = same_initial_head(ours, reference)
        math_check = same_math(ours, reference)
        print(f"same epoch order: {order}; same initial head: {head}; same math (no dropout, {math_check['steps']} "
              f"steps, loss over real tokens): largest loss difference {math_check['largest_loss_difference']:.2e}; "
              f"each side's own loss (bertpre's leaves padding out of the softmax, transformers' does not) differs by up to "
              f"{math_check['own_losses_largest_difference']:.2e}", flush=True)
        if math_check["own_losses_largest_difference"] > 1e-4:
            print(f"note: on the same weights and batch the two sides' own losses differ: padding positions' start "
                  f"logits are {math_check['padding_start_logits_first_padded_batch']} (bertpre: the head's bias; "
                  "transformers: computed from the padding tokens), and transformers' loss spans the padding", flush=True)
        sides = {"bertpre": ours, "reference": reference}
        for seed in range(args.seeds):
            load = os.getloadavg()[0]
            runs = {}
            for side in (("bertpre", "reference") if seed % 2 == 0 else ("reference", "bertpre")):
                runs[side] = sides[side].run(seed)
                results[side].append(runs[side][0] | {"seed": seed, "load_average_1": load})
            checks.append(cross_check(ours, reference, runs["bertpre"][1], runs["bertpre"][2],
                                      runs["reference"][1], runs["reference"][2]))
            print(f"seed {seed} (load {load:.1f}): " + "; ".join(
                f"{side} EM {r[-1]['exact_match']:.1f} F1 {r[-1]['f1']:.1f}, train {r[-1]['train_s']:.0f} s, "
                f"answer {r[-1]['answer_s']:.1f} s" for side, r in results.items()), flush=True)
            for name, value in checks[-1].items():
                for example in value["examples"]:
                    print(f"note: {name}: {example}", flush=True)
            print("  cross-check: " + "; ".join(
                f"{name} {value.get('answers_differ', value.get('questions_differ'))} differ"
                for name, value in checks[-1].items()), flush=True)

    summary = {side: {"exact_match": mean_std([run["exact_match"] for run in runs]),
                      "f1": mean_std([run["f1"] for run in runs]),
                      "train_s": statistics.median(run["train_s"] for run in runs),
                      "answer_s": statistics.median(run["answer_s"] for run in runs)}
               for side, runs in results.items()}
    differences = {metric: welch(*([run[metric] for run in results[side]] for side in ("bertpre", "reference")))
                   for metric in ("exact_match", "f1")}
    def ratio(theirs: float, ours: float) -> float:
        return theirs / ours if ours else math.nan  # times are kept to 0.01 s: a tiny run's may be 0

    ratios = {key: ratio(summary["reference"][key], summary["bertpre"][key]) for key in ("train_s", "answer_s")}
    # a seed's two sides run back to back, so their ratio is what load on a shared machine disturbs least
    ratios |= {f"{key}_per_seed_median": statistics.median(
        ratio(theirs[key], ours[key]) for ours, theirs in zip(results["bertpre"], results["reference"], strict=True))
        for key in ("train_s", "answer_s")}
    print(f"\n{len(ours.scored):,} questions scored, {args.seeds} seed(s)")
    for side, values in summary.items():
        print(f"  {side:<10} EM {values['exact_match']['mean']:.2f} ± {values['exact_match']['std']:.2f}   "
              f"F1 {values['f1']['mean']:.2f} ± {values['f1']['std']:.2f}   train {values['train_s']:.1f} s   "
              f"answer {values['answer_s']:.1f} s")
    for metric, difference in differences.items():
        interval = difference["interval"]
        shown = f"[{interval[0]:+.2f}, {interval[1]:+.2f}]" if interval else "(one seed: no interval)"
        print(f"  bertpre - reference {metric} {difference['difference']:+.2f} {shown} (goal: the interval holds 0)")
    print(f"  time reference / bertpre: training {ratios['train_s']:.2f}x, answering {ratios['answer_s']:.2f}x "
          f"(medians of the sides); seed by seed, median {ratios['train_s_per_seed_median']:.2f}x and "
          f"{ratios['answer_s_per_seed_median']:.2f}x")
    path = write_result(args.name or ("qa" if args.language == "en" else "qa-zh"), {
        "settings": {key: (str(value) if isinstance(value, Path) else value)
                     for key, value in vars(args).items() if key not in ("out",)}
        | {"hyperparameters": vars(hp), "question_answering": vars(settings), "torch_threads": threads},
        "task": {"language": ours.language, "files": {split: str(path) for split, path in files.items()},
                 "questions": {"train": len(ours.data.train), "scored": len(ours.scored)},
                 "windows": {"train": len(ours.train), "scored": len(ours.test)},
                 "pretraining_corpus_overlap": overlap},
        "same_windows": windows, "same_epoch_order": order, "same_initial_head": head, "same_math": math_check,
        "windowing_s": {"bertpre": round(ours.windowing_s, 2), "reference": round(reference.windowing_s, 2)},
        "cross_check_per_seed": checks,
        "reference_attention": results["reference"][0].get("attention"),
        "pretrain_s": round(pretrain_s, 1), "wall_s": round(time.perf_counter() - started, 1),
        "per_seed": results, "summary": summary, "bertpre_minus_reference": differences,
        "time_ratio_reference_over_bertpre": ratios,
        "note": "other agents share this machine's 2 cores; sides alternate first/second each seed "
                "so load hits both; load average before each seed in per_seed",
        "target": "EM and F1 within noise (the 95% Welch interval holds 0)",
        "findings": FINDINGS,
    }, args.out, argv, versions=("torch", "transformers", "tokenizers"), torch_threads=threads)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
