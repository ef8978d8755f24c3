"""The vocab's alphabet before and after issue 40: [UNK] share and vocabulary use, same run.

For each corpus and vocab size, `train_tokenizer` on the corpus's documents (read as `bertpre
tokenize` reads them) with four alphabets, then every sentence encoded with the vocab:

- before: `--limit-alphabet 1000`, the 1,000 most frequent characters (the old default; an
  explicit limit still trains exactly as the old code did);
- after: the default, every character as frequent as the rarest subword kept, never fewer than
  the 1,000 most frequent (`bertpre.tokenizer.alphabet`);
- one scale alone: the default's rule without its floor of 1,000 (why the floor);
- every character: `--limit-alphabet` = the corpus's distinct characters (the most a vocab can
  cover, at the cost of subwords when the vocab is full).

Printed and recorded per variant: the vocab size reached, the characters it holds, the [UNK]
share of tokens, the share of the text's characters outside the vocab, tokens per 100
characters (how finely the text is cut), the share of vocab entries the corpus uses at least
once, and the training seconds.

    .venv/bin/python -m bench.alphabet                       # zh-fortunes, WikiText-2, Shakespeare
    .venv/bin/python -m bench.alphabet --vocab-sizes 8000 --corpora ../shared/corpora/zh-fortunes.txt
    .venv/bin/python -m bench.alphabet --make-japanese /tmp/ja-debian.txt   # then --corpora it

Japanese is not among ../shared/corpora. `--make-japanese PATH` writes one from Debian's
Japanese documentation (apt-get install debian-reference-ja maint-guide-ja debian-faq-ja
developers-reference-ja manpages-ja): the guides whole, then manual pages in name order, troff
requests dropped, up to `--japanese-megabytes` (5).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import re
import time
from pathlib import Path
from unittest import mock

from bench.common import CORPORA, RESULTS, write_result
from bertpre.tokenizer import wordpiece
from bertpre.tokenizer.wordpiece import SPECIAL_TOKENS, UNK_TOKEN, train_tokenizer
from data_prep import read_documents

DEFAULT_CORPORA = [
    str(CORPORA / "zh-fortunes.txt"),
    f"{CORPORA / 'wikitext2-valid.txt'},{CORPORA / 'wikitext2-test.txt'}",
    str(CORPORA / "tinyshakespeare.txt"),
]
VARIANTS = ["before", "after", "one scale alone", "every character"]


def measure(documents: list[list[str]], vocab_size: int, variant: str, distinct: int,
            lowercase: bool) -> dict:
    """Train one variant's vocab on `documents`, encode them, and count."""
    limit = {"before": 1000, "every character": distinct}.get(variant)
    floor = 0 if variant == "one scale alone" else wordpiece.ALWAYS_KEPT_CHARACTERS
    start = time.perf_counter()
    with mock.patch.object(wordpiece, "ALWAYS_KEPT_CHARACTERS", floor):
        tokenizer = train_tokenizer(documents, vocab_size=vocab_size, limit_alphabet=limit,
                                    lowercase=lowercase)
    seconds = time.perf_counter() - start
    vocab = tokenizer.get_vocab()
    sentences = [sentence for document in documents for sentence in document]
    used: set[int] = set()
    tokens = unknown = 0
    unk_id = tokenizer.token_to_id(UNK_TOKEN)
    for first in range(0, len(sentences), 10_000):
        for encoding in tokenizer.encode_batch(sentences[first:first + 10_000], add_special_tokens=False):
            used.update(encoding.ids)
            tokens += len(encoding.ids)
            unknown += encoding.ids.count(unk_id)
    normalize = tokenizer.normalizer.normalize_str
    text = normalize("".join(sentences))
    characters = sum(1 for char in text if not char.isspace())
    outside = sum(1 for char in text if not char.isspace() and char not in vocab)
    ordinary = [token for token in vocab if token not in SPECIAL_TOKENS]
    return {
        "vocab_size": len(vocab),
        "characters_in_vocab": sum(1 for token in ordinary if len(token) == 1),
        "unk_share": unknown / max(tokens, 1),
        "text_outside_vocab_share": outside / max(characters, 1),
        "tokens_per_100_characters": 100 * tokens / max(characters, 1),
        "vocab_used_share": len(used & {vocab[token] for token in ordinary}) / max(len(ordinary), 1),
        "train_seconds": seconds,
    }


def distinct_characters(documents: list[list[str]], lowercase: bool) -> int:
    """Distinct non-space characters as the vocab sees them (lowercased and accent-stripped
    when uncased)."""
    normalize = wordpiece.build_tokenizer(None, lowercase=lowercase).normalizer.normalize_str
    return len({char for document in documents for sentence in document
                for char in normalize(sentence) if not char.isspace()})


def make_japanese(out: Path, megabytes: float) -> Path:
    """Japanese text from Debian's documentation packages (see the module docstring)."""
    guides = ["/usr/share/debian-reference/debian-reference.ja.txt.gz",
              "/usr/share/doc/maint-guide-ja/maint-guide.ja.txt.gz",
              "/usr/share/doc/debian/FAQ/debian-faq.ja.txt.gz",
              *sorted(glob.glob("/usr/share/developers-reference/ja/_sources/*.txt")),
              *sorted(glob.glob("/usr/share/man/ja/**/*.gz", recursive=True))]
    written, limit = 0, megabytes * 1e6
    with open(out, "w", encoding="utf-8") as file:
        for path in guides:
            opener = gzip.open if path.endswith(".gz") else open
            try:
                with opener(path, "rt", encoding="utf-8") as source:
                    text = source.read()
            except (UnicodeDecodeError, OSError):
                continue
            if "/man/" in path:  # troff: keep the text lines and the headings' words
                text = "\n".join(re.sub(r"\\f[BIRP]|\\[-&e]|\\", "", line) for line in text.splitlines()
                                 if not line.startswith((".", "'")))
            block = text.strip() + "\n\n"
            file.write(block)
            written += len(block.encode("utf-8"))
            if written >= limit:
                break
    print(f"wrote {out}: {written / 1e6:.2f} MB")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", nargs="+", default=DEFAULT_CORPORA,
                        help="Corpora, each one path or comma-separated paths read as one corpus.")
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=[8000, 30522])
    parser.add_argument("--cased", action="store_true",
                        help="Cased vocabs (Japanese loses its voicing marks to uncased accent stripping).")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--name", default="alphabet", help="Results file name before the date.")
    parser.add_argument("--make-japanese", type=Path, metavar="PATH",
                        help="Write a Japanese corpus from Debian's Japanese documentation, then stop.")
    parser.add_argument("--japanese-megabytes", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.make_japanese is not None:
        make_japanese(args.make_japanese, args.japanese_megabytes)
        return

    figures: dict[str, dict] = {}
    print(f"{'corpus':<28}{'vocab':>7}  {'variant':<16}{'reached':>8}{'chars':>7}{'[UNK]':>9}"
          f"{'outside':>9}{'tok/100c':>9}{'used':>7}{'train s':>9}")
    for corpus in args.corpora:
        paths = [Path(path) for path in corpus.split(",")]
        name = "+".join(path.name for path in paths)
        documents = list(read_documents(paths))
        distinct = distinct_characters(documents, not args.cased)
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in paths)).hexdigest()
        figures[name] = {"megabytes": sum(path.stat().st_size for path in paths) / 1e6, "sha256": digest,
                         "documents": len(documents), "distinct_characters": distinct, "vocab_sizes": {}}
        for vocab_size in args.vocab_sizes:
            row = figures[name]["vocab_sizes"][str(vocab_size)] = {}
            for variant in VARIANTS:
                row[variant] = result = measure(documents, vocab_size, variant, distinct, not args.cased)
                print(f"{name[:27]:<28}{vocab_size:>7}  {variant:<16}{result['vocab_size']:>8}"
                      f"{result['characters_in_vocab']:>7}{result['unk_share']:>9.3%}"
                      f"{result['text_outside_vocab_share']:>9.3%}{result['tokens_per_100_characters']:>9.2f}"
                      f"{result['vocab_used_share']:>7.1%}{result['train_seconds']:>9.1f}")
    settings = {"vocab_sizes": args.vocab_sizes, "lowercase": not args.cased, "min_frequency": 2,
                "variants": VARIANTS}
    path = write_result(args.name, {"settings": settings, "figures": figures}, args.results, argv,
                        versions=("tokenizers",))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
