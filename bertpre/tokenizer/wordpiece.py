"""WordPiece tokenizers as in the original BERT: train one, load one, save one in Hugging Face layout."""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from bertpre.errors import UserError, interruptible
from bertpre.tokenizer.alphabet import (
    ALWAYS_KEPT_CHARACTERS,
    CharacterCounts,
    keep_frequent_characters,
    normalized_counts,
    plan_alphabet,
    token_uses,
    trained_word_counts,
)
from bertpre.tokenizer.bpe_unigram import SOURCE_TOKENIZER_FILES
from bertpre.tokenizer.roles import attach_roles, read_roles, tokenizer_kind

logger = logging.getLogger(__name__)

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Order fixes the ids of a trained vocab: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
SPECIAL_TOKENS = [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN]
CONTINUING_SUBWORD_PREFIX = "##"
# Longer words become [UNK]; 100 is BERT's and Hugging Face's value.
MAX_INPUT_CHARS_PER_WORD = 100
MODEL_MAX_LENGTH = 512

TOKENIZER_FILE = "tokenizer.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# What a tokenizer folder holds, in Hugging Face layout (written by `save_tokenizer`), and the
# files of a released BPE or Unigram tokenizer that DATA keeps as they are (an export copies them).
TOKENIZER_FILES = (TOKENIZER_FILE, VOCAB_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE,
                   *(name for name in SOURCE_TOKENIZER_FILES
                     if name not in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE)))


def build_tokenizer(vocab: dict[str, int] | None, lowercase: bool) -> Tokenizer:
    """The BERT WordPiece pipeline around `vocab` (untrained when None), as BertTokenizerFast builds it."""
    if vocab is None:
        model = models.WordPiece(unk_token=UNK_TOKEN, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)
    else:
        model = models.WordPiece(
            vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD
        )
    tokenizer = Tokenizer(model)
    # Accents are stripped exactly when lowercasing, as in the original uncased BERT.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUING_SUBWORD_PREFIX)
    if vocab is not None:
        # As in BertTokenizerFast: special tokens written in the text ("[MASK]") stay whole.
        tokenizer.add_special_tokens([token for token in SPECIAL_TOKENS if token in vocab])
        _add_bert_template(tokenizer)
    return tokenizer


def _add_bert_template(tokenizer: Tokenizer) -> None:
    """`[CLS] A [SEP]` for one segment, `[CLS] A [SEP] B [SEP]` with type ids 0/1 for two."""
    cls_id, sep_id = tokenizer.token_to_id(CLS_TOKEN), tokenizer.token_to_id(SEP_TOKEN)
    if cls_id is None or sep_id is None:
        return  # check_special_tokens reports this to the user
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS_TOKEN} $A {SEP_TOKEN}",
        pair=f"{CLS_TOKEN} $A {SEP_TOKEN} $B:1 {SEP_TOKEN}:1",
        special_tokens=[(CLS_TOKEN, cls_id), (SEP_TOKEN, sep_id)],
    )


def _as_batches(texts: Iterable[list[str] | str]) -> Iterator[list[str]]:
    """Lists of texts (documents, batches) pass through; bare strings become batches of one."""
    for item in texts:
        yield [item] if isinstance(item, str) else list(item)


class _FileLines:
    """The lines of plain-text files, re-readable, in batches (as `tokenizers` reads files)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files

    def __iter__(self) -> Iterator[list[str]]:
        for path in self.files:
            with open(path, encoding="utf-8", errors="replace") as file:
                batch: list[str] = []
                for line in file:
                    batch.append(line)
                    if len(batch) == 1000:
                        yield batch
                        batch = []
                if batch:
                    yield batch


def _train_once(
    texts: Iterable[list[str]],
    lowercase: bool,
    trainer_options: dict,
    alphabet: list[str],
    seeds: list[str],
    length: int | None,
) -> tuple[dict[str, int], trainers.WordPieceTrainer]:
    tokenizer = build_tokenizer(None, lowercase)
    trainer = trainers.WordPieceTrainer(
        special_tokens=SPECIAL_TOKENS + seeds,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
        **trainer_options,
    )
    stopping = threading.Event()

    def until_stopped() -> Iterator[list[str]]:
        for batch in texts:
            if stopping.is_set():
                return  # the trainer finishes on what it has read, and its result is dropped
            yield batch

    # tokenizers reads the texts from threads of its own while the calling thread waits in native
    # code, where no signal handler runs: wait in Python instead, so SIGINT/SIGTERM stop at once.
    interruptible(lambda: tokenizer.train_from_iterator(until_stopped(), trainer, length=length),
                  stopping.set)
    return tokenizer.get_vocab(with_added_tokens=False), trainer


def train_tokenizer(
    documents_or_files: Iterable[list[str] | str] | list[Path],
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    limit_alphabet: int | None = None,
    show_progress: bool = False,
    length: int | None = None,
    character_counts: CharacterCounts | None = None,
) -> Tokenizer:
    """Train a BERT WordPiece vocab; the same texts and options always give the same vocab.

    Args:
        documents_or_files: documents (lists of sentences), batches or single texts; or a list
            of plain-text file paths. An iterable that can be iterated again (a list, a
            re-iterable object) is streamed; a one-shot iterator is held in memory.
        vocab_size: size of the final vocab, special tokens and alphabet included. The result
            has exactly this size unless the corpus has too few distinct subwords (then fewer).
        limit_alphabet: keep this many of the most frequent characters. None (the default):
            every character that occurs at least as often as the rarest subword the vocab
            keeps, and every character when all fit (`alphabet.keep_frequent_characters`).
        length: number of items, for the progress bar only.
        character_counts: the texts' character counts, when the caller already has them
            (saves a pass over the texts).

    Raises:
        UserError: `vocab_size` cannot hold the special tokens and the corpus alphabet.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise UserError(
            f"vocab size {vocab_size} is too small: it must exceed the {len(SPECIAL_TOKENS)} special "
            "tokens plus the corpus alphabet; use --vocab-size 30522 or a few thousand for a small corpus"
        )
    texts: Iterable[list[str]]
    if isinstance(documents_or_files, list | tuple) and documents_or_files and all(
        isinstance(item, Path) for item in documents_or_files
    ):
        texts = _FileLines(list(documents_or_files))  # type: ignore[arg-type]
    elif iter(documents_or_files) is documents_or_files:
        texts = list(_as_batches(documents_or_files))  # a one-shot iterator cannot be replayed
    else:
        texts = _Batches(documents_or_files)
    if character_counts is None:
        character_counts = CharacterCounts(build_tokenizer(None, lowercase))
        for batch in texts:
            character_counts.update(batch)
    # Fixing the alphabet and the ## tokens up front makes training deterministic (see alphabet.py).
    pipeline = build_tokenizer(None, lowercase)
    prefix = CONTINUING_SUBWORD_PREFIX
    alphabet, seeds = plan_alphabet(pipeline, character_counts, prefix, limit_alphabet)
    if not alphabet:
        raise UserError("the corpus has no text to train a vocab on; check the corpus files")
    # The characters every vocab of these options holds: the vocab must have room for them.
    always, always_seeds = (alphabet, seeds) if limit_alphabet is not None else plan_alphabet(
        pipeline, character_counts, prefix, ALWAYS_KEPT_CHARACTERS)
    floor = len(SPECIAL_TOKENS) + len(always) + len(always_seeds)
    if vocab_size < floor:
        raise UserError(
            f"vocab size {vocab_size} is too small for this corpus: the special tokens and the "
            f"alphabet ({len(always)} characters, {len(always_seeds)} of them also as ##c) alone take "
            f"{floor} entries; use --vocab-size of at least {floor} (or lower --limit-alphabet)"
        )
    counts = normalized_counts(pipeline, character_counts)
    # Characters beyond the always-kept ones compete with the merges for room (alphabet.py).
    competing = limit_alphabet is None and len(alphabet) > len(always)
    trainer_options = {
        # With every character, room for as many merges as the vocab could hold without them:
        # keep_frequent_characters then weighs the characters against the merges.
        "vocab_size": vocab_size + (len(alphabet) + len(seeds) if competing else 0),
        "min_frequency": min_frequency,
        "show_progress": show_progress,
    }
    # Should the seeds miss a ## token the trainer needs (its own normalization of a character
    # in context differs from ours), train again with it: the set is fixed, so once is enough.
    for _ in range(3):
        vocab, trainer = _train_once(texts, lowercase, trainer_options, alphabet, seeds, length)
        created = {
            token
            for token in vocab
            if len(token) == len(CONTINUING_SUBWORD_PREFIX) + 1
            and token.startswith(CONTINUING_SUBWORD_PREFIX)
        }
        corrected = sorted(set(seeds) | created)
        if corrected == seeds:
            break
        logger.info("retraining the vocab with %d corrected ## seeds", len(corrected))
        seeds = corrected

    if competing and len(vocab) > vocab_size:
        encoder = Tokenizer(models.WordPiece(vocab, unk_token=UNK_TOKEN,
                                             max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        uses = token_uses(encoder, trained_word_counts(trainer))
        vocab = keep_frequent_characters(vocab, uses, counts, alphabet, SPECIAL_TOKENS, vocab_size,
                                         prefix, ALWAYS_KEPT_CHARACTERS)
    # The trainer keeps the specials and every alphabet symbol (also as ##c), so it overshoots
    # rather than drop characters when vocab_size is below that floor.
    if len(vocab) > vocab_size:
        raise UserError(
            f"vocab size {vocab_size} is too small for this corpus: the special tokens and the "
            f"alphabet alone take {len(vocab)} entries; use --vocab-size of at least {len(vocab)}"
        )
    if len(vocab) < vocab_size:
        logger.warning("the vocab has %d entries, fewer than the %d asked for: %s", len(vocab),
                       vocab_size, _why_short(vocab, counts, limit_alphabet, min_frequency))
    # Rebuild around the learned vocab so a trained tokenizer is the same object as one loaded
    # from its vocab.txt (the trainer leaves the WordPiece model's other settings at defaults).
    return build_tokenizer(vocab, lowercase)


def _why_short(vocab: dict[str, int], counts: dict[str, int], limit_alphabet: int | None,
               min_frequency: int) -> str:
    """Why a trained vocab came out smaller than asked: the alphabet's limit, or the corpus."""
    outside = [char for char in counts if char not in vocab]
    if limit_alphabet is not None and outside:
        share = sum(counts[char] for char in outside) / max(sum(counts.values()), 1)
        return (f"--limit-alphabet {limit_alphabet} left out {len(outside):,} of the corpus's "
                f"{len(counts):,} characters ({share:.2%} of its text, which becomes [UNK]); "
                f"leave --limit-alphabet out, or raise it to {len(counts)}")
    return f"the corpus has too few distinct subwords seen at least {min_frequency} times"


class _Batches:
    """A re-iterable view of documents or texts as batches."""

    def __init__(self, texts: Iterable[list[str] | str]) -> None:
        self.texts = texts

    def __iter__(self) -> Iterator[list[str]]:
        return _as_batches(self.texts)


def _has_bert_specials(tokenizer: Tokenizer) -> bool:
    return all(tokenizer.token_to_id(token) is not None for token in SPECIAL_TOKENS)


def is_bert_wordpiece(tokenizer: Tokenizer) -> bool:
    """A WordPiece tokenizer with BERT's special tokens: bertpre writes its files in its own layout."""
    return tokenizer_kind(tokenizer) == "wordpiece" and _has_bert_specials(tokenizer)


def check_config_vocab_size(folder: Path, tokenizer: Tokenizer) -> None:
    """Refuse a model folder whose config.json has fewer embedding rows than the tokenizer has
    ids (a tokenizer of another model); more rows (a padded table) are fine."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return  # not ours to judge: only the tokenizer files are read here
    rows = config.get("vocab_size") if isinstance(config, dict) else None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if isinstance(rows, int) and not isinstance(rows, bool) and rows < size:
        raise UserError(f"{config_path} says vocab_size {rows:,}, but {folder / TOKENIZER_FILE} has "
                        f"{size:,} ids: the tokenizer is not this model's (its ids past {rows - 1:,} have "
                        "no embedding); use the model's own tokenizer files")


def check_special_tokens(tokenizer: Tokenizer, source: str | Path) -> None:
    """Raise UserError unless the vocab holds all of BERT's special tokens."""
    missing = [token for token in SPECIAL_TOKENS if tokenizer.token_to_id(token) is None]
    if missing:
        raise UserError(
            f"tokenizer {source} lacks the BERT special tokens {' '.join(missing)}; "
            "use a BERT WordPiece vocab or train one by leaving out --tokenizer"
        )


def read_vocab_file(path: Path) -> dict[str, int]:
    """token → id from a BERT vocab.txt (one token a line, id = line number)."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise UserError(f"vocab file {path} is not UTF-8 text ({error.reason}); pass a BERT vocab.txt") from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise UserError(f"vocab file {path} is empty; pass a BERT vocab.txt")
    # As transformers' load_vocab: a repeated token keeps its last line number.
    return {token.rstrip("\r"): index for index, token in enumerate(lines)}


def _lowercase_of_config(folder: Path) -> bool | None:
    config_path = folder / TOKENIZER_CONFIG_FILE
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{config_path} is not valid JSON; fix or delete it") from None
    value = config.get("do_lower_case") if isinstance(config, dict) else None
    return value if isinstance(value, bool) else None


def _vocab_looks_lowercase(vocab: dict[str, int]) -> bool:
    """A vocab without uppercase letters (outside special tokens like [UNK]) is an uncased one."""
    return not any(
        any(char.isupper() for char in token)
        for token in vocab
        if not (token.startswith("[") and token.endswith("]"))
    )


def load_tokenizer(path: str | Path, lowercase: bool | None = None) -> Tokenizer:
    """Load a tokenizer.json, a BERT vocab.txt, or a folder holding either (tokenizer.json first).

    Args:
        lowercase: for a vocab.txt only: whether to lowercase and strip accents. When None, it
            comes from tokenizer_config.json beside the vocab (`do_lower_case`), else from the
            vocab itself (no uppercase tokens → uncased). A tokenizer.json carries its own.

    Raises:
        UserError: the path is missing, unreadable, or lacks BERT's special tokens.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"tokenizer path {path} does not exist; pass a tokenizer.json, vocab.txt or tokenizer folder")
    if path.is_dir():
        if (path / TOKENIZER_FILE).is_file():
            path = path / TOKENIZER_FILE
        elif (path / VOCAB_FILE).is_file():
            path = path / VOCAB_FILE
        else:
            raise UserError(f"tokenizer folder {path} has neither {TOKENIZER_FILE} nor {VOCAB_FILE}; bertpre "
                            "reads a Hugging Face tokenizer.json (WordPiece, byte-level BPE or Unigram) or a "
                            "BERT vocab.txt: save one there with "
                            "AutoTokenizer.from_pretrained(SOURCE).save_pretrained(FOLDER)")

    if path.suffix == ".json":
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON
            raise UserError(f"{path} is not a Hugging Face tokenizer.json ({error})") from None
        if lowercase is not None and lowercase != tokenizer_lowercases(tokenizer):
            logger.warning("%s sets its own casing; ignoring lowercase=%s", path, lowercase)
        if not is_bert_wordpiece(tokenizer):
            # Roles as AutoTokenizer reads them from the config files beside tokenizer.json.
            attach_roles(tokenizer, read_roles(path.parent, tokenizer))
            check_config_vocab_size(path.parent, tokenizer)
            return tokenizer
    else:
        vocab = read_vocab_file(path)
        config_lowercase = _lowercase_of_config(path.parent)
        if lowercase is None:
            lowercase = config_lowercase if config_lowercase is not None else _vocab_looks_lowercase(vocab)
        elif config_lowercase is not None and config_lowercase != lowercase:
            logger.warning(
                "%s says do_lower_case=%s, but lowercase=%s was asked for; using %s",
                path.parent / TOKENIZER_CONFIG_FILE, config_lowercase, lowercase, lowercase,
            )
        tokenizer = build_tokenizer(vocab, lowercase)
    check_special_tokens(tokenizer, path)
    return tokenizer


def tokenizer_lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's BERT normalizer lowercases (False when it has none)."""
    normalizer = json.loads(tokenizer.normalizer.__getstate__()) if tokenizer.normalizer is not None else {}
    stack = [normalizer]
    while stack:
        node = stack.pop()
        if node.get("type") == "BertNormalizer":
            return bool(node.get("lowercase"))
        if node.get("type") == "Lowercase":
            return True
        stack.extend(node.get("normalizers") or [])
    return False


def vocab_in_id_order(tokenizer: Tokenizer) -> list[str]:
    """Tokens sorted by id; the ids must run 0..n-1 without gaps (as vocab.txt needs)."""
    by_id = {index: token for token, index in tokenizer.get_vocab(with_added_tokens=True).items()}
    tokens = [by_id.get(index) for index in range(len(by_id))]
    if None in tokens:
        raise UserError("the tokenizer's ids have gaps, so it cannot be written as a vocab.txt")
    return tokens  # type: ignore[return-value]


def save_tokenizer(tokenizer: Tokenizer, folder: str | Path, lowercase: bool | None = None) -> Path:
    """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json.

    `transformers.AutoTokenizer.from_pretrained(folder)` then gives a BERT tokenizer with the
    same ids. `lowercase` defaults to what the tokenizer's normalizer does.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if lowercase is None:
        lowercase = tokenizer_lowercases(tokenizer)
    tokens = vocab_in_id_order(tokenizer)
    tokenizer.save(str(folder / TOKENIZER_FILE))
    (folder / VOCAB_FILE).write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    special_tokens_map = {
        "unk_token": UNK_TOKEN,
        "sep_token": SEP_TOKEN,
        "pad_token": PAD_TOKEN,
        "cls_token": CLS_TOKEN,
        "mask_token": MASK_TOKEN,
    }
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lowercase,
        "strip_accents": None,  # None follows do_lower_case, as BERT does
        "tokenize_chinese_chars": True,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        **special_tokens_map,
    }
    _write_json(folder / TOKENIZER_CONFIG_FILE, tokenizer_config)
    _write_json(folder / SPECIAL_TOKENS_MAP_FILE, special_tokens_map)
    return folder


def _write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def check_same_vocab(data_tokenizer: Tokenizer, model_tokenizer: Tokenizer, data: str | Path,
                     owner: str, alternative: str | None = None) -> None:
    """Refuse DATA whose ids were made by another vocabulary than the model's own.

    Args:
        owner: who the model's tokenizer belongs to, for the message (e.g. "run runs/base").
        alternative: the command's other way out, where it has one (pretrain's "a new --out":
            a new run may take any vocabulary); evaluate has none.
    """
    if data_tokenizer.get_vocab() != model_tokenizer.get_vocab():
        raise UserError(f"DATA folder {data} was made by another tokenizer than {owner} (another "
                        "vocab); use DATA tokenized with that tokenizer (bertpre tokenize "
                        f"--tokenizer){f', or {alternative}' if alternative else ''}")
