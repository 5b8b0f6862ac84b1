"""Build a tiny transformers encoder + tokenizer and save them to a directory (run under MODEL_PY).

Used by tests/test_policies.py to exercise the hf wrapper offline: `python build_tiny_hf.py DIR`.
"""

from __future__ import annotations

import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

WORDS = ["[PAD]", "[UNK]", "pick", "up", "the", "red", "cube", "push", "to", "goal"]


def main(out: str) -> None:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1])
