#!/usr/bin/python3
"""Writes tests/data/tokenizer/sentencepiece.golden.jsonl: ids of the corpus under the small SentencePiece model in
tests/data/tokenizer/sentencepiece/ (trained with spm_train on the corpus: BPE, 600 pieces, byte fallback), as the
sentencepiece library itself encodes them (Debian's python3-sentencepiece; hence /usr/bin/python3)."""
import json
import os

import sentencepiece as spm

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "tokenizer")
sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, "sentencepiece", "tokenizer.model"))
with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f, \
        open(os.path.join(DATA, "sentencepiece.golden.jsonl"), "w", encoding="utf-8") as out:
    for line in f:
        text = json.loads(line)
        ids = sp.encode(text)
        out.write(json.dumps({"ids": ids, "ids_special": [sp.bos_id()] + ids, "decoded": sp.decode(ids)},
                             ensure_ascii=False) + "\n")
print("bos", sp.bos_id(), "eos", sp.eos_id(), "vocab", sp.get_piece_size())
