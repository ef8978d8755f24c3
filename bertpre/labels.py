"""What a batch's label columns mean, shared by batches/, model/, train/ and tools/.

`labels` holds the original token id where the MLM head predicts and `IGNORE_INDEX` elsewhere;
`next_sentence_label` holds the pair label (`IGNORE_INDEX` where there is none); `mask_action`
says how the collator corrupted each predicted position.
"""

IGNORE_INDEX = -100  # Hugging Face's and torch.nn.CrossEntropyLoss's value
PAIR_TASKS = ("nsp", "sop", "none")  # next sentence, sentence order, one segment (no pair label)
MASK_COUNTS = ("exact", "sampled")  # round(p·n) predictions a sequence, or each token drawn with p

# mask_action codes: not predicted, replaced by [MASK], replaced by a random token, kept as is.
NO_ACTION, MASKED, RANDOM_TOKEN, KEPT = 0, 1, 2, 3
MASK_ACTION_NAMES = {MASKED: "mask", RANDOM_TOKEN: "random", KEPT: "kept"}


def query_rows(length: int, share: float) -> int:
    """P, the predicted positions (XLNet's query rows) a row of `length` tokens has room for
    at a predicted `share`: round(length · share), at least 1 (share 1: every row). The one
    count the collator, the objective's cost options, the cost model and `info` all read."""
    return max(1, int(length * share + 0.5))
