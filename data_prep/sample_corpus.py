"""The built-in sample corpus: prose assembled at run time from the Python interpreter's own docs.

Nothing is downloaded and no third-party text ships with bertpre. Two sources that come with
every CPython: the language reference topics behind `help()` (`pydoc_data.topics`), then the
docstrings of the standard library, read from its source files with `ast` (so no module is
imported and none can have side effects). The text is written in the plain-text corpus format:
one paragraph a line, a blank line between documents (one per help topic, module or class).

`python -m data_prep.sample_corpus corpus/` writes it where the documentation's commands expect
a corpus folder: a first run needs no text of your own.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import itertools
import os
import re
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import CorpusError

SAMPLE_CORPUS_NAME = "sample-corpus.txt"
TARGET_BYTES = 640_000

# Folders of the standard library that hold tests, GUIs or vendored code rather than prose.
_SKIPPED_FOLDERS = frozenset(
    "test tests idlelib tkinter turtledemo lib2to3 site-packages dist-packages __pycache__ "
    "ensurepip _bundled pydoc_data __phello__".split()
)
_ROLE = re.compile(r":[\w:.-]+:`~?([^`]*)`")  # :func:`len` -> len
_LITERAL = re.compile(r"``([^`]*)``")  # ``None`` -> None
_STRONG = re.compile(r"\*\*([^*]+)\*\*")  # **PEP 8** -> PEP 8
_NOT_LETTER = re.compile(r"[^\w ]|[\d_]")


def _standard_library_sources() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subfolders, names in os.walk(root):
        # prune in place so os.walk never descends into tests or site-packages
        subfolders[:] = [
            name
            for name in subfolders
            if name not in _SKIPPED_FOLDERS and not name.startswith(("config-", "."))
        ]
        files.extend(Path(folder, name) for name in names if name.endswith(".py"))
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def _prose_paragraphs(text: str | None, indented: bool = False) -> list[str]:
    """The paragraphs of a docstring that read as prose, each unwrapped onto one line.

    Args:
        text: a docstring (or help text) with blank lines between paragraphs.
        indented: keep indented paragraphs (help topics indent prose under a definition);
            in docstrings indentation marks code, argument lists and tables.
    """
    if not text:
        return []
    paragraphs = []
    for block in inspect.cleandoc(text).split("\n\n"):
        if indented:
            block = textwrap.dedent(block)
        lines = block.splitlines()
        if (
            not lines
            or lines[0][:1].isspace()
            or any(line.lstrip().startswith((">>>", "...", "$ ", "%")) for line in lines)
        ):
            continue  # code samples, indented lists and tables
        paragraph = " ".join(block.split())
        for markup in (_ROLE, _LITERAL, _STRONG):
            paragraph = markup.sub(r"\1", paragraph)
        letters = len(paragraph) - len(_NOT_LETTER.findall(paragraph))
        if (
            len(paragraph.split()) < 4
            or letters < 0.85 * len(paragraph)
            or not paragraph.endswith((".", "?", "!"))
        ):
            continue
        paragraphs.append(paragraph)
    return paragraphs


def _help_topic_documents() -> Iterator[list[str]]:
    """One document per topic of the language reference that `help()` shows."""
    try:
        topics = importlib.import_module("pydoc_data.topics").topics
    except ImportError:  # some distributions package the help topics separately
        return
    for name in sorted(topics):
        document = _prose_paragraphs(topics[name], indented=True)
        if document:
            yield document


def _docstring_documents() -> Iterator[list[str]]:
    for path in _standard_library_sources():
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield from _documents_of_source(source)


def _documents_of_source(source: str) -> Iterator[list[str]]:
    """One document for the module (with its functions), one for each class (with its methods)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    module_document = _prose_paragraphs(ast.get_docstring(tree, clean=False))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module_document += _prose_paragraphs(ast.get_docstring(node, clean=False))
        elif isinstance(node, ast.ClassDef):
            class_document = _prose_paragraphs(ast.get_docstring(node, clean=False))
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    class_document += _prose_paragraphs(ast.get_docstring(member, clean=False))
            if class_document:
                yield class_document
    if module_document:
        yield module_document


def write_sample_corpus(out_dir: Path, target_bytes: int = TARGET_BYTES) -> Path:
    """Write the sample corpus (about `target_bytes` of English prose) into `out_dir`.

    The same Python installation always gives the same file.

    Returns:
        The path of the written `sample-corpus.txt`.

    Raises:
        CorpusError: this Python ships too little documentation (no standard library sources).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seen: set[tuple[str, ...]] = set()
    documents: list[str] = []
    size = 0
    for document in itertools.chain(_help_topic_documents(), _docstring_documents()):
        key = tuple(document)
        if key in seen:
            continue
        seen.add(key)
        text = "\n".join(document) + "\n"
        documents.append(text)
        size += len(text.encode("utf-8")) + 1
        if size >= target_bytes:
            break
    if size < min(target_bytes, 500_000):
        raise CorpusError(
            f"only {size} bytes of documentation found in this Python's standard library; "
            "the sample corpus needs its source files (or pass your own corpus)"
        )
    corpus = out_dir / SAMPLE_CORPUS_NAME
    corpus.write_text("\n".join(documents), encoding="utf-8")
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write sample-corpus.txt into")
    parser.add_argument("--bytes", type=int, default=TARGET_BYTES,
                        help=f"about how much text to write (default {TARGET_BYTES:,})")
    args = parser.parse_args(argv)
    try:
        corpus = write_sample_corpus(args.out, args.bytes)
    except CorpusError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {corpus} ({corpus.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
