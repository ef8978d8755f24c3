"""bertpre.tokenizer.vocab_extension: appending corpus words to a released vocab, and tracing each
appended token back to the source pieces its embedding row starts from."""
from __future__ import annotations

import pytest
import transformers

from bertpre.errors import UserError
from bertpre.tokenizer.vocab_extension import (
    VocabMismatch,
    count_words,
    extend_vocab,
    vocab_extension,
    vocab_sha256,
)
from bertpre.tokenizer.wordpiece import (
    SPECIAL_TOKENS,
    build_tokenizer,
    save_tokenizer,
    train_tokenizer,
    vocab_in_id_order,
)

GENERAL = [
    ["The patient walked to the garden in the morning.", "A doctor read the letter twice."],
    ["The river was cold, and the children stayed home.", "Nobody knew why the shop was closed."],
    ["She wrote the report on Tuesday and sent it to the office.", "The office was quiet."],
]
# How often each domain word occurs in DOMAIN: the ranking extend_vocab must follow.
DOMAIN_WORDS = {"immunohistochemistry": 6, "cardiomyopathy": 5, "thrombocytopenia": 4,
                "echocardiography": 3, "Nephrotoxicity": 2, "pancreatitis": 1}
DOMAIN = [[f"The patient had {word} in the report." for word, times in DOMAIN_WORDS.items()
           for _ in range(times)]]


def bert_tokenizer_from_vocab(vocab_file, lowercase: bool):
    """transformers' BertTokenizerFast built from a vocab.txt (v5 takes `vocab`, v4 `vocab_file`)."""
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.BertTokenizerFast(vocab=str(vocab_file), do_lower_case=lowercase)
    return transformers.BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=lowercase)


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def source(request):
    return train_tokenizer(GENERAL, vocab_size=150, lowercase=request.param, min_frequency=1)


def sentences():
    return [sentence for document in DOMAIN for sentence in document]


def test_frequent_domain_words_are_appended_after_the_source_ids(source):
    extended = extend_vocab(source, [sentences()], count=20, min_frequency=2)
    old, new = vocab_in_id_order(source), vocab_in_id_order(extended)
    assert new[:len(old)] == old
    lowercase = source.normalizer.normalize_str("A") == "a"
    nephro = "nephrotoxicity" if lowercase else "Nephrotoxicity"
    # Seen 6, 5, 4, 3 and 2 times; pancreatitis once, below min_frequency. Frequent words the
    # source lacks ("had", ...) rank among them by their own counts.
    added = new[len(old):]
    assert [word for word in added if word in (*DOMAIN_WORDS, nephro)] == [
        "immunohistochemistry", "cardiomyopathy", "thrombocytopenia", "echocardiography", nephro]
    counts = count_words(source, [sentences()])
    assert [counts[word] for word in added] == sorted((counts[word] for word in added), reverse=True)
    assert "pancreatitis" not in added
    for word in ("immunohistochemistry", "cardiomyopathy"):
        encoding = extended.encode(f"More {word} here.", add_special_tokens=False)
        assert word in encoding.tokens
        assert extended.token_to_id(word) >= len(old)


def test_at_most_count_tokens_are_added_and_the_same_each_time(source):
    first = extend_vocab(source, [sentences()], count=3, min_frequency=2)
    second = extend_vocab(source, [sentences()], count=3, min_frequency=2)
    assert first.get_vocab_size() == source.get_vocab_size() + 3
    assert vocab_in_id_order(first) == vocab_in_id_order(second)
    assert first.to_str() == second.to_str()
    # The best 3 of a budget of 20 are the 3 of a budget of 3.
    more = extend_vocab(source, [sentences()], count=20, min_frequency=2)
    assert vocab_in_id_order(more)[:first.get_vocab_size()] == vocab_in_id_order(first)


def test_special_tokens_casing_and_template_are_the_sources(source):
    extended = extend_vocab(source, [sentences()], count=20, min_frequency=2)
    for token in SPECIAL_TOKENS:
        assert extended.token_to_id(token) == source.token_to_id(token)
    text = "The Doctor read it. [MASK]"
    assert extended.encode(text).ids == source.encode(text).ids
    assert extended.normalizer.__getstate__() == source.normalizer.__getstate__()
    assert extended.post_processor.__getstate__() == source.post_processor.__getstate__()


def test_text_of_old_words_gets_the_ids_transformers_gives_with_the_source_vocab(source, tmp_path):
    extended = extend_vocab(source, [sentences()], count=20, min_frequency=2)
    reference = bert_tokenizer_from_vocab(save_tokenizer(source, tmp_path / "source") / "vocab.txt",
                                          lowercase=source.normalizer.normalize_str("A") == "a")
    words = [token for token in vocab_in_id_order(source) if token.isalpha()]  # whole words, no ##
    assert len(words) > 20
    texts = [" ".join(words[start:start + 7]) + "." for start in range(0, len(words), 7)]
    ours = [encoding.ids for encoding in extended.encode_batch(texts)]
    assert ours == reference(texts)["input_ids"]
    # The grown folder loads in transformers with the new words whole.
    auto = transformers.AutoTokenizer.from_pretrained(str(save_tokenizer(extended, tmp_path / "grown")))
    domain = ["Immunohistochemistry showed cardiomyopathy.", *texts,
              *(sentence for document in GENERAL for sentence in document)]
    assert auto(domain)["input_ids"] == [encoding.ids for encoding in extended.encode_batch(domain)]


def test_no_candidate_leaves_the_vocab_as_it_was(source):
    extended = extend_vocab(source, [["the the the"]], count=5, min_frequency=2)
    assert vocab_in_id_order(extended) == vocab_in_id_order(source)
    assert vocab_extension(source, extended) is None


def test_vocab_sha256_is_the_sha256_of_the_written_vocab_txt(source, tmp_path):
    import hashlib

    vocab_file = save_tokenizer(source, tmp_path) / "vocab.txt"
    assert vocab_sha256(source) == hashlib.sha256(vocab_file.read_bytes()).hexdigest()


# --- vocab_extension -----------------------------------------------------------------------

HANDMADE = [*SPECIAL_TOKENS, "immuno", "##histo", "##chemistry", "histo", "##chem", "chem",
            "##istry", "a", "##b"]


def handmade(tokens: list[str]):
    return build_tokenizer({token: index for index, token in enumerate(tokens)}, lowercase=True)


def test_each_added_token_maps_to_the_pieces_the_source_splits_it_into():
    source = handmade(HANDMADE)
    ids = {token: index for index, token in enumerate(HANDMADE)}
    added = ["immunohistochemistry", "##histochemistry", "histochemistry", "chemistry",
             "##bb", "immunoλ", "a" * 101]
    extended = handmade([*HANDMADE, *added])
    assert vocab_extension(source, extended) == [
        [ids["immuno"], ids["##histo"], ids["##chemistry"]],
        [ids["##histo"], ids["##chemistry"]],  # a continuation piece, split as one
        [ids["histo"], ids["##chemistry"]],
        [ids["chem"], ids["##istry"]],
        [ids["##b"], ids["##b"]],
        [ids["[UNK]"]],  # λ is in no piece: [UNK], as the source reads the word
        [ids["[UNK]"]],  # over max_input_chars_per_word
    ]


def test_word_pieces_agree_with_the_tokenizers_wordpiece_model(source):
    extended = extend_vocab(source, [sentences()], count=20, min_frequency=2)
    added = vocab_in_id_order(extended)[source.get_vocab_size():]
    assert vocab_extension(source, extended) == [
        [token.id for token in source.model.tokenize(word)] for word in added]


def test_identical_vocabs_give_none():
    assert vocab_extension(handmade(HANDMADE), handmade(HANDMADE)) is None


@pytest.mark.parametrize("tokens, says", [
    ([*HANDMADE[:6], "histo", "##chemistry", "##histo", *HANDMADE[9:], "new"], "id 6 is 'histo'"),
    (HANDMADE[:-1], "fewer than the model's"),
    (["new", *HANDMADE], "id 0 is 'new'"),
])
def test_a_vocab_that_is_not_an_extension_is_refused(tokens, says):
    with pytest.raises(VocabMismatch, match=says) as raised:
        vocab_extension(handmade(HANDMADE), handmade(tokens))
    assert isinstance(raised.value, UserError)
