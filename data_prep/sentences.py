"""A rule-based sentence splitter for Latin-script and CJK text.

No library fits here: pysbd is unmaintained, NLTK's punkt and spaCy need model downloads, and
blingfire ships native binaries. The rules cover what NSP/SOP pairs need: end marks . ! ? …
(and the Devanagari danda, the Arabic question mark) followed by a space, abbreviations,
initials and decimals that do not end a sentence, closing quotes and brackets kept with their
sentence, and CJK end marks (。！？； and their variants) that need no space.
"""

from __future__ import annotations

import re

_SPACED_END_MARKS = ".!?…।॥؟۔"
_CJK_END_MARKS = "。！？；｡．"
_CLOSERS = "\"'”’」』）)]】》〉»›"
_OPENERS = "\"'“‘「『（([【《〈«‹¿¡"

# end marks, the quotes and brackets that close the sentence, then the space after them
_CANDIDATE = re.compile(
    f"(?P<mark>[{re.escape(_SPACED_END_MARKS + _CJK_END_MARKS)}]+)"
    f"(?P<closers>[{re.escape(_CLOSERS)}]*)"
    r"(?P<space>\s*)"
)
_CJK = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff]"
)
_WORD_CHARACTER = re.compile(r"\w")
_DOTTED_ABBREVIATION = re.compile(r"(?:[A-Za-z]{1,2}\.)+[A-Za-z]{1,2}")

# Never end a sentence: they precede a name or a phrase.
_NEVER_FINAL = frozenset(
    "Mr Mrs Ms Mx Dr Prof St Mt Ft Gen Col Capt Lt Sgt Cmdr Adm Rev Hon Sen Rep Gov Pres "
    "Messrs Mme Mlle Msgr e.g i.e cf vs viz approx ca".split()
)
# Precede a number ("No. 5", "Fig. 3", "Jan. 12"); elsewhere they are ordinary words.
_BEFORE_NUMBERS = frozenset(
    "No Nos no Fig Figs fig Vol Vols vol p pp Art Sec Ch ch Eq Ref Ex ed eds "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
# May end a sentence: they do when the next word is one that commonly opens a sentence.
_AMBIGUOUS = frozenset("etc Inc Ltd Co Corp Bros Jr Sr al".split())
_SENTENCE_STARTERS = frozenset(
    "A An The This That These Those It Its He She His Her They Their We Our I You In On At For "
    "But And Or So As If When While After Before However There Then Thus Yet Also Some Many "
    "Most All Each No Not One Two".split()
)


def _is_cjk(character: str) -> bool:
    return bool(character) and _CJK.match(character) is not None


def _word_before(text: str, end: int) -> str:
    return text[text.rfind(" ", 0, end) + 1 : end].lstrip(_OPENERS)


def _word_after(text: str, start: int) -> str:
    end = text.find(" ", start)
    return text[start : end if end >= 0 else len(text)].lstrip(_OPENERS).rstrip(",;:")


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Decide whether the end marks in `match` close a sentence, from the words around them."""
    mark = match["mark"]
    if mark.strip(_SPACED_END_MARKS):
        return True  # a CJK end mark needs no space or capital after it
    following = text[match.end()]
    if not match["space"]:
        # "3.14", "U.S.A", "Yahoo!Mail" go on; Chinese after ! ? … does not need a space
        previous = text[match.start() - 1 : match.start()]
        return mark != "." and (_is_cjk(following) or (mark[0] == "…" and _is_cjk(previous)))
    if following.islower():
        return False
    if mark != "." or match["closers"]:
        return True
    word = _word_before(text, match.start())
    if word in _NEVER_FINAL:
        return False
    if word in _BEFORE_NUMBERS and following.isdigit():
        return False
    if (
        word in _AMBIGUOUS
        or (len(word) == 1 and word.isalpha())
        or _DOTTED_ABBREVIATION.fullmatch(word)
    ):
        return _word_after(text, match.end()) in _SENTENCE_STARTERS
    return True


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences, each stripped; end marks stay with their sentence.

    Args:
        text: one paragraph of cleaned text (whitespace collapsed to single spaces).

    Returns:
        The sentences in order; [] for blank text.
    """
    sentences: list[str] = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        stop, end = match.start("space"), match.end()
        if end == len(text) or not _ends_sentence(text, match):
            continue
        if text[end] == '"' and text.count('"', start, end) % 2 == 1:
            # a closing quote set apart by a space, as in tokenized text: 'said " Stop . " Then'
            after = end + 1
            while after < len(text) and text[after] == " ":
                after += 1
            if after == len(text) or text[after].islower():
                continue
            stop, end = end + 1, after
        _append_sentence(sentences, text[start:stop].strip())
        start = end
    if start == 0:
        text = text.strip()
        return [text] if text else []
    _append_sentence(sentences, text[start:].strip())
    return sentences


def _append_sentence(sentences: list[str], sentence: str) -> None:
    """Append a sentence; a piece with no word in it (a stray quote, "...") joins the previous one."""
    if not sentence:
        return
    if sentences and not _WORD_CHARACTER.search(sentence):
        sentences[-1] = f"{sentences[-1]} {sentence}"
    else:
        sentences.append(sentence)
