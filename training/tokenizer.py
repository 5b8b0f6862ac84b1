"""The reference policy's tokenizer: a word-level vocabulary trained with `tokenizers` on the instructions.

The shipped tasks' instructions are a closed set of a few dozen words, so a word-level model is
exact (no subword pieces to learn) and tiny; it is saved as a `PreTrainedTokenizerFast` so the
wrapper loads it with `AutoTokenizer.from_pretrained(dir, local_files_only=True)`.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, UNK = "[PAD]", "[UNK]"


def train_tokenizer(instructions: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=[PAD, UNK], min_frequency=1)
    tokenizer.train_from_iterator(sorted(set(instructions)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK)
