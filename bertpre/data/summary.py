"""What `bertpre tokenize` says when it ends: the summary table (a DATA folder's, a shard's or a set
of shards') and the warning when too much of the text is [UNK]."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bertpre.data.folder import TOKENIZER_DIR
from bertpre.tokenizer.wordpiece import MAX_INPUT_CHARS_PER_WORD, SPECIAL_TOKENS, VOCAB_FILE

# Above this share of [UNK] tokens `bertpre tokenize` warns and names what would lower it.
UNK_WARNING_SHARE = 0.005


def _describe_added(manifest: dict, out: str | Path) -> str:
    """How many tokens --add-vocab appended, with the first few (from DATA's vocab.txt)."""
    tokenizer, asked = manifest["tokenizer"], manifest["options"]["add_vocab"]
    added, first = tokenizer["added_pieces"], tokenizer["source_vocab_size"]
    text = f"{added:,} tokens after the {first:,} of the --tokenizer"
    if added < asked:
        text += (f" (asked {asked:,}: fewer corpus words outside the vocab occur "
                 f"{manifest['options']['min_frequency']}+ times)")
    vocab_file = Path(out) / TOKENIZER_DIR / VOCAB_FILE
    if added and vocab_file.is_file():
        examples = vocab_file.read_text(encoding="utf-8").split("\n")[first:first + min(added, 5)]
        text += ", e.g. " + " ".join(examples)
    return text


def format_summary(manifest: dict, out: str | Path, extra: Sequence[tuple[str, str]] = ()) -> str:
    """The end-of-run table the CLI prints (a shard's, or a set of shards' merged), with `extra` rows."""
    counts, tokenizer = manifest["counts"], manifest["tokenizer"]
    total_bytes = sum(source["bytes"] for source in manifest["sources"])
    asked = manifest["options"]["vocab_size"]
    short = f" (asked {asked:,}: {why_vocab_is_short(manifest)})" if (
        tokenizer["trained"] and tokenizer["vocab_size"] < asked) else ""
    rows = [
        ("DATA folder", str(out)),
        ("sources", f"{len(manifest['sources'])} file(s), {total_bytes / 1e6:.2f} MB"),
    ]
    if "shard" in manifest:
        rows.append(("shard", f"{manifest['shard']['index']} of {manifest['shard']['count']} "
                              "(the counts below are its own)"))
    if "shards" in manifest:
        folders = manifest["shards"]["folders"]
        shown = ", ".join(folder["path"] for folder in folders[:3]) + (", …" if len(folders) > 3 else "")
        rows.append(("shards", f"{manifest['shards']['count']} ({shown}), every one checked"))
    rows += [
        ("documents", f"{counts['documents']:,} ({counts['train_documents']:,} train, "
                      f"{counts['validation_documents']:,} validation)"),
        ("sentences", f"{counts['sentences']:,}"),
        ("tokens", f"{counts['tokens']:,}"),
        (f"words over {MAX_INPUT_CHARS_PER_WORD} chars", f"{counts['long_words']:,}"),
        ("duplicates dropped", f"{counts['duplicate_documents_dropped']:,} documents"),
        ("empty dropped", f"{counts['empty_documents_dropped']:,} documents"),
        ("invalid UTF-8 replaced", f"{counts['invalid_utf8_replacements']:,} times"),
        ("vocab", f"{tokenizer['vocab_size']:,} tokens{short}, "
                  f"{tokenizer['kind'] + ', ' if 'kind' in tokenizer else ''}"
                  f"{'lowercase' if tokenizer['lowercase'] else 'cased'}, "
                  f"{'trained' if tokenizer['trained'] else 'extended' if 'added_pieces' in tokenizer else 'reused'}"),
    ]
    if "added_pieces" in tokenizer:
        rows.append(("added to vocab", _describe_added(manifest, out)))
    if "sample" in tokenizer:
        sample = tokenizer["sample"]
        rows.append(("vocab trained on", f"a sample of {sample['documents']:,} documents, "
                                         f"{sample['bytes'] / 1e6:,.2f} MB"))
    rows += list(extra)
    unknown = (tokenizer.get("roles") or {}).get("unk_token") or "[UNK]"  # a released tokenizer's own name
    rows.append((f"{unknown} share", _describe_unk(manifest)))  # last: the line a user reads first
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _describe_unk(manifest: dict) -> str:
    """The [UNK] share, and how much of the text is in characters the vocab lacks."""
    counts, alphabet = manifest["counts"], manifest["tokenizer"].get("alphabet")
    text = f"{counts['unk_share']:.4%} ({counts['unk_tokens']:,} tokens"
    if alphabet is not None and alphabet["occurrences_outside"]:
        text += (f"; {alphabet['characters'] - alphabet['in_vocab']:,} of the corpus's "
                 f"{alphabet['characters']:,} characters are not in the vocab, "
                 f"{alphabet['occurrences_outside'] / max(alphabet['occurrences'], 1):.2%} of its text")
    return text + ")"


def why_vocab_is_short(manifest: dict) -> str:
    """Why a trained vocab has fewer entries than asked: --limit-alphabet left characters out,
    or the corpus has too few subwords."""
    limit, alphabet = manifest["options"].get("limit_alphabet"), manifest["tokenizer"].get("alphabet")
    if limit is not None and alphabet is not None and alphabet["in_vocab"] < alphabet["characters"]:
        return (f"--limit-alphabet {limit} left out {alphabet['characters'] - alphabet['in_vocab']:,} "
                "characters")
    return "the corpus has too few subwords"


def unk_warning(manifest: dict) -> str | None:
    """One line when more than UNK_WARNING_SHARE of the tokens are [UNK], naming the cause and
    the option that lowers it; None below."""
    counts, tokenizer, options = manifest["counts"], manifest["tokenizer"], manifest["options"]
    share = counts["unk_share"]
    if share <= UNK_WARNING_SHARE:
        return None
    head = f"warning: {share:.2%} of the tokens are [UNK] (above {UNK_WARNING_SHARE:.1%}): "
    alphabet = tokenizer.get("alphabet")
    if tokenizer["trained"] and alphabet is not None and alphabet["occurrences_outside"]:
        kept, everything = alphabet["in_vocab"], alphabet["characters"]
        outside = (f"the other {everything - kept:,} "
                   f"({alphabet['occurrences_outside'] / max(alphabet['occurrences'], 1):.2%} of the text) are [UNK]")
        if "sample" in tokenizer:
            return (head + f"the vocab's sample of {tokenizer['sample']['documents']:,} documents "
                    f"held {kept:,} of the corpus's {everything:,} characters, so {outside}; train "
                    "it on more text (a larger --vocab-sample-bytes, or all of it without one)")
        if options.get("limit_alphabet") is not None:
            cause = (f"--limit-alphabet {options['limit_alphabet']} kept the {kept:,} most frequent "
                     f"of the corpus's {everything:,} characters")
        else:
            least = alphabet["least_count_in_vocab"]
            cause = (f"the vocab kept the {kept:,} of the corpus's {everything:,} characters seen at "
                     f"least {least:,} time{'s' if least != 1 else ''} (as often as its rarest "
                     f"subword, in --vocab-size {options['vocab_size']:,})")
        fix = f"--limit-alphabet {everything}"
        needed = len(SPECIAL_TOKENS) + everything + alphabet["continuing"]
        if needed > options["vocab_size"]:
            fix += f" and a --vocab-size of at least {needed}"
        return head + f"{cause}, so {outside}; keep them all with {fix}"
    if counts["long_words"] and counts["long_words"] >= counts["unk_tokens"] / 2:
        words = f"{counts['long_words']:,} " + ("word is" if counts["long_words"] == 1 else "words are")
        return (head + f"{words} over {MAX_INPUT_CHARS_PER_WORD} characters (each one [UNK]); "
                "clean them out of the corpus")
    if not tokenizer["trained"] and "kind" in tokenizer:  # --add-vocab grows WordPiece vocabularies only
        return (head + f"the --tokenizer {tokenizer['kind']} vocab lacks characters of this corpus; train "
                "a vocab on the corpus by leaving out --tokenizer (--tokenizer-type "
                f"{tokenizer['kind']} for one of its kind)")
    if not tokenizer["trained"]:
        return (head + "the --tokenizer vocab lacks words or characters of this corpus; grow it "
                "with --add-vocab N, or train a vocab on the corpus by leaving out --tokenizer")
    return head + "check the corpus for text that is not what it should be (bertpre inspect DATA)"
