"""A tokenizer's special tokens by role (start, separator, padding, mask, unknown), its kind and
its pair layout, so that the data path asks for `roles.mask_token_id`, never for "[MASK]".

Hugging Face's `run_mlm.py` handles BERT, RoBERTa and XLM-R alike because its tokenizer and
collator work by role (`tokenizer.mask_token_id`, `all_special_ids`). bertpre does the same:

- **Kind**: `wordpiece` (BERT: `##` continues a word), `bpe` (byte-level, RoBERTa: `Ġ` begins a
  word after a space) or `unigram` (SentencePiece, XLM-R: `▁` begins a word), from the
  tokenizer.json's model and pre-tokenizer.
- **Pair layout**: `bert`, `[CLS] A [SEP] B [SEP]`, or `roberta`, `<s> A </s></s> B </s>`, from
  the post-processor (BertProcessing, RobertaProcessing, or a template's separators between A
  and B).
- **Roles**: read as `AutoTokenizer.from_pretrained` reads them, from tokenizer_config.json,
  then special_tokens_map.json over it (`read_roles`); where a folder names none (a bare
  tokenizer.json, a vocab.txt, a tokenizer built in memory), the post-processor gives the start
  and separator, the model its unknown token, and the usual names the rest (`token_roles`).

`load_tokenizer` attaches the roles it read to the tokenizer object (`tokenizer.roles`), and
`token_roles` returns them, so callers pass the tokenizer alone as before.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenizers import Tokenizer, models

from bertpre.errors import UserError

KINDS = ("wordpiece", "bpe", "unigram")
PAIR_LAYOUTS = ("bert", "roberta")
ROLES = ("cls", "sep", "pad", "mask", "unk")
# The names each role goes by in released tokenizers, in the order they are tried.
USUAL_NAMES = {
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
    "unk": ("[UNK]", "<unk>"),
}
# Where transformers' tokenizer_config.json / special_tokens_map.json name a role; the start
# and the separator fall back to the sequence's begin and end tokens, as RoBERTa's do.
_CONFIG_KEYS = {"cls": ("cls_token", "bos_token"), "sep": ("sep_token", "eos_token"),
                "pad": ("pad_token",), "mask": ("mask_token",), "unk": ("unk_token",)}
BYTE_LEVEL_MARKER = "Ġ"  # a byte-level BPE piece that begins after a space
METASPACE_MARKER = "▁"  # SentencePiece's space, which begins a word
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"


@dataclass(frozen=True)
class TokenRoles:
    """The special tokens a pretraining sequence is built from, by role, with their ids.

    `word_prefix` is how a piece says where words are: for `wordpiece` the prefix that marks a
    piece continuing a word ("##"), for `bpe` and `unigram` the marker of a piece that begins
    one ("Ġ", "▁"); "" when the pieces do not say (then every piece begins a word).
    """

    kind: str
    pair_layout: str
    cls_token: str
    cls_token_id: int
    sep_token: str
    sep_token_id: int
    pad_token: str
    pad_token_id: int
    mask_token: str
    mask_token_id: int
    unk_token: str | None
    unk_token_id: int | None
    word_prefix: str

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of the roles but [UNK] (which is text the vocab lacks, and may be predicted)."""
        return frozenset((self.cls_token_id, self.sep_token_id, self.pad_token_id, self.mask_token_id))

    @property
    def separators_between_segments(self) -> int:
        """Separators between A and B: one in BERT's layout, two (`</s></s>`) in RoBERTa's."""
        return 2 if self.pair_layout == "roberta" else 1

    def begins_word(self, token: str) -> bool:
        """Whether a (non-special) piece begins a word, by the kind's marker."""
        if not self.word_prefix:
            return True
        if self.kind == "wordpiece":
            return not token.startswith(self.word_prefix)
        return token.startswith(self.word_prefix)

    def as_dict(self) -> dict:
        return asdict(self)


def tokenizer_kind(tokenizer: Tokenizer) -> str:
    """wordpiece, bpe or unigram, from the tokenizer's model.

    Raises:
        UserError: another model (WordLevel), which masked-language pretraining here does not take.
    """
    model = tokenizer.model
    if isinstance(model, models.WordPiece):
        return "wordpiece"
    if isinstance(model, models.BPE):
        return "bpe"
    if isinstance(model, models.Unigram):
        return "unigram"
    raise UserError(f"the tokenizer's model is {type(model).__name__}; bertpre takes WordPiece, "
                    "byte-level BPE and Unigram tokenizers")


def _state(component) -> dict:
    return json.loads(component.__getstate__()) if component is not None else {}


def _components(state: dict) -> list[dict]:
    """A pre-tokenizer's or post-processor's parts (a Sequence's members, else itself)."""
    parts = state.get("pretokenizers") or state.get("processors")
    return [part for member in parts for part in _components(member)] if parts else ([state] if state else [])


def word_prefix(tokenizer: Tokenizer, kind: str) -> str:
    """The continuing prefix of WordPiece, or the word-start marker of the pre-tokenizer."""
    if kind == "wordpiece":
        return getattr(tokenizer.model, "continuing_subword_prefix", "##") or "##"
    for part in _components(_state(tokenizer.pre_tokenizer)):
        if part.get("type") == "ByteLevel":
            return BYTE_LEVEL_MARKER
        if part.get("type") == "Metaspace":
            return part.get("replacement") or METASPACE_MARKER
    return ""


def _template_specials(template: list[dict]) -> tuple[list[str], list[str]]:
    """The special tokens before the first sequence and between the first and the second."""
    before, between, seen = [], [], 0
    for piece in template:
        if "Sequence" in piece:
            seen += 1
        elif "SpecialToken" in piece:
            (before if seen == 0 else between if seen == 1 else []).append(piece["SpecialToken"]["id"])
    return before, between


def post_processor_roles(tokenizer: Tokenizer) -> tuple[str | None, str | None, str | None]:
    """(start token, separator, pair layout) the post-processor adds; Nones without one."""
    for part in _components(_state(tokenizer.post_processor)):
        kind = part.get("type")
        if kind in ("BertProcessing", "RobertaProcessing"):
            return part["cls"][0], part["sep"][0], "roberta" if kind == "RobertaProcessing" else "bert"
        if kind == "TemplateProcessing":
            before, _ = _template_specials(part.get("single") or [])
            pair_before, between = _template_specials(part.get("pair") or [])
            if not between:
                continue
            start = (before or pair_before or [None])[0]
            return start, between[0], "roberta" if len(between) >= 2 else "bert"
    return None, None, None


def specials_before_second_text(tokenizer: Tokenizer) -> int:
    """The special tokens a pair's template puts before its second text: BERT's `[CLS] A [SEP]` 2,
    RoBERTa's `<s> A </s></s>` 3, XLNet's `A [SEP]` 1; 0 without a post-processor."""
    for part in _components(_state(tokenizer.post_processor)):
        kind = part.get("type")
        if kind == "BertProcessing":
            return 2
        if kind == "RobertaProcessing":
            return 3
        if kind == "TemplateProcessing":
            before, between = _template_specials(part.get("pair") or [])
            return len(before) + len(between)
    return 0


def text_segments(sequence_ids: list[int | None], specials_before_second: int) -> list[int]:
    """Which text each token of an encoding belongs to: 0 for the first and the special tokens
    before the second (`specials_before_second`), 1 from there on, whether the second text kept
    any tokens or not (BERT's `[CLS] A [SEP] [SEP]`, its B cut away, ends on type 1).

    Args:
        sequence_ids: the encoding's (0, 1, or None for a special token the template added).
    """
    segments, specials, segment = [], 0, 0
    for sequence in sequence_ids:
        if sequence is None:
            segment = max(segment, int(specials >= specials_before_second))
            specials += 1
        else:
            segment = max(segment, sequence)
        segments.append(segment)
    return segments


def _named(value: object) -> str | None:
    """A role's token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def configured_names(folder: Path) -> dict[str, str]:
    """The roles' token strings a tokenizer folder names, as AutoTokenizer reads them:
    tokenizer_config.json, then special_tokens_map.json over it."""
    names: dict[str, str] = {}
    for file_name in (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE):
        path = folder / file_name
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{path} is not valid JSON; fix or delete it") from None
        if not isinstance(config, dict):
            continue
        for role, keys in _CONFIG_KEYS.items():
            for key in keys:
                name = _named(config.get(key))
                if name is not None:  # special_tokens_map.json, read second, wins
                    names[f"{role}:{key}"] = name
    resolved = {}
    for role, keys in _CONFIG_KEYS.items():
        for key in keys:  # the role's own key first, then its fallback (bos, eos)
            if f"{role}:{key}" in names:
                resolved[role] = names[f"{role}:{key}"]
                break
    return resolved


def token_roles(tokenizer: Tokenizer, names: dict[str, str] | None = None,
                source: str | Path = "the tokenizer") -> TokenRoles:
    """The roles of `tokenizer`: those `load_tokenizer` attached, else found (see the module).

    Args:
        names: role → token string, as a folder's config names them (`configured_names`); the
            roles it leaves out are found by the post-processor, the model and the usual names.
        source: what to call the tokenizer in an error.

    Raises:
        UserError: a role has no token in the vocabulary (the message names the role).
    """
    attached = getattr(tokenizer, "roles", None)
    if names is None and isinstance(attached, TokenRoles):
        return attached
    kind = tokenizer_kind(tokenizer)
    names = dict(names or {})
    start, separator, layout = post_processor_roles(tokenizer)
    for role, found in (("cls", start), ("sep", separator)):
        if found is not None:
            names.setdefault(role, found)
    model_unk = unknown_token_id(tokenizer)
    if model_unk is not None:
        names.setdefault("unk", tokenizer.id_to_token(model_unk))
    for role in ROLES:
        if role not in names:
            names[role] = next((name for name in USUAL_NAMES[role] if tokenizer.token_to_id(name) is not None),
                               None)
    ids = {role: (tokenizer.token_to_id(name) if name is not None else None) for role, name in names.items()}
    missing = [role for role in ("cls", "sep", "pad", "mask") if ids[role] is None]
    if missing:
        raise UserError(_missing_roles_message(missing, names, source))
    if layout is None:
        layout = "bert" if kind == "wordpiece" else "roberta"
    return TokenRoles(
        kind=kind, pair_layout=layout,
        cls_token=names["cls"], cls_token_id=ids["cls"], sep_token=names["sep"], sep_token_id=ids["sep"],
        pad_token=names["pad"], pad_token_id=ids["pad"], mask_token=names["mask"],
        mask_token_id=ids["mask"], unk_token=names["unk"] if ids["unk"] is not None else None,
        unk_token_id=ids["unk"], word_prefix=word_prefix(tokenizer, kind),
    )


def unknown_token_id(tokenizer: Tokenizer) -> int | None:
    """The id the model gives text its vocabulary lacks; None when it has none (byte-level BPE)."""
    model = tokenizer.model
    if isinstance(model, models.Unigram):
        unk_id = json.loads(tokenizer.to_str())["model"].get("unk_id")
        return unk_id if isinstance(unk_id, int) else None
    unk_token = getattr(model, "unk_token", None)
    return tokenizer.token_to_id(unk_token) if isinstance(unk_token, str) else None


def _missing_roles_message(missing: list[str], names: dict[str, str | None], source: str | Path) -> str:
    described = []
    for role in missing:
        named = names.get(role)
        described.append(f"{role} ({named} is not in its vocabulary)" if named is not None else
                         f"{role} (none of {' '.join(USUAL_NAMES[role])}, and tokenizer_config.json "
                         f"names no {_CONFIG_KEYS[role][0]})")
    return (f"tokenizer {source} has no {', '.join(described)} token; masked-language pretraining "
            "builds every sequence from a start, a separator, padding and a mask token: use a "
            "tokenizer that has them (BERT's, RoBERTa's, XLM-R's), or train one by leaving out --tokenizer")


def read_roles(folder: Path, tokenizer: Tokenizer) -> TokenRoles:
    """The roles of the tokenizer saved in `folder`, as its config files name them."""
    return token_roles(tokenizer, configured_names(folder), source=folder)


def attach_roles(tokenizer: Tokenizer, roles: TokenRoles) -> Tokenizer:
    """Let `token_roles(tokenizer)` answer `roles` (the object keeps them until copied or pickled)."""
    tokenizer.roles = roles
    return tokenizer
